package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/internal/httpreply"
)

// TestFallbackClosedIs503: a fail-closed fallback, the store's own (a
// Result with Fallback set and Allowed false) or the middleware's
// (FailClosed), is 503 with Retry-After: 1 and no RateLimit field, not a
// refusal by the limit; a fail-open fallback serves the request.
func TestFallbackClosedIs503(t *testing.T) {
	fallback := func(allowed bool) *fakeStore {
		r := funnel.Result{Allowed: allowed, Fallback: true, Limit: 1}
		return &fakeStore{
			throttle: func(context.Context, string) (funnel.Result, error) { return r, nil },
			do: func(_ context.Context, _ []funnel.Op, res []funnel.Result) error {
				res[0] = r
				return nil
			},
		}
	}
	limits := []funnel.Limit{
		funnel.PerMinute(1),
		{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Minute},
		{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute},
	}
	cases := []struct {
		name  string
		store *fakeStore
		opt   httplimit.Option
		open  bool
	}{
		{"store fails closed", fallback(false), httplimit.Fail(funnel.FailOpen), false},
		{"store fails open", fallback(true), httplimit.Fail(funnel.FailClosed), true},
		{"FailClosed", downStore(), httplimit.Fail(funnel.FailClosed), false},
		{"FailOpen", downStore(), httplimit.Fail(funnel.FailOpen), true},
	}
	for _, c := range cases {
		for _, limit := range limits {
			for _, headers := range []bool{true, false} {
				name := c.name + "/" + limit.Algorithm.String()
				if !headers {
					name += "/NoHeaders"
				}
				t.Run(name, func(t *testing.T) {
					var ran atomic.Int32
					app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran.Add(1) })
					opts := []httplimit.Option{c.opt}
					if !headers {
						opts = append(opts, httplimit.NoHeaders())
					}
					srv := serve(t, newMW(t, funnel.New(c.store), limit, httplimit.ClientIP(), opts...), app)
					r := get(t, srv)
					if r.header.Get("RateLimit") != "" {
						t.Errorf("a fallback describes the key's state: RateLimit %q", r.header.Get("RateLimit"))
					}
					if c.open {
						if r.status != 200 || ran.Load() != 1 || r.header.Get("Retry-After") != "" {
							t.Errorf("fail open: %d, handler ran %d times, Retry-After %q", r.status, ran.Load(), r.header.Get("Retry-After"))
						}
						return
					}
					if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "1" {
						t.Errorf("fail closed: %d, Retry-After %q; want 503, 1", r.status, r.header.Get("Retry-After"))
					}
					if r.problem.Status != http.StatusServiceUnavailable || r.problem.Type != httpreply.TypeTemporaryReducedCapacity {
						t.Errorf("fail closed problem %+v", r.problem)
					}
					if ran.Load() != 0 {
						t.Error("fail closed: the handler ran")
					}
				})
			}
		}
	}
}

// TestBugIsNotAFallback: an error that is not a store that cannot decide
// (funnel.Unavailable), such as a store's internal error, is answered 500
// and not served, whatever the fail mode: only an outage falls back (it
// was served under fail open before one classifier served every edge).
func TestBugIsNotAFallback(t *testing.T) {
	bug := errors.New("redisstore: internal error: the script answered status 7")
	st := &fakeStore{
		throttle: func(context.Context, string) (funnel.Result, error) { return funnel.Result{}, bug },
		do:       func(context.Context, []funnel.Op, []funnel.Result) error { return bug },
	}
	for _, mode := range []funnel.FailMode{funnel.FailClosed, funnel.FailOpen} {
		var ran atomic.Int32
		app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran.Add(1) })
		srv := serve(t, newMW(t, funnel.New(st), funnel.PerMinute(1), httplimit.ClientIP(), httplimit.Fail(mode)), app)
		if r := get(t, srv); r.status != http.StatusInternalServerError || ran.Load() != 0 {
			t.Errorf("%v: %d, handler ran %d times; want 500, never", mode, r.status, ran.Load())
		}
	}
}
