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

// written is what a handler wrote: the status (0 when it wrote nothing, which
// net/http sends as 200) and the Content-Type.
type written struct {
	status      int
	contentType string
}

// statusWriter records the status written through it.
type statusWriter struct {
	http.ResponseWriter
	w written
}

func (s *statusWriter) WriteHeader(code int) {
	if s.w.status == 0 {
		s.w = written{status: code, contentType: s.Header().Get("Content-Type")}
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.w.status == 0 {
		s.WriteHeader(http.StatusOK)
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// recording serves h and sends what it wrote on the returned channel once
// it has returned: the server's side of a request whose client has gone
// and cannot tell.
func recording(h http.Handler) (http.Handler, <-chan written) {
	ch := make(chan written, 16)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		ch <- sw.w
	}), ch
}

// expired gives each request a context whose deadline has passed, as a
// server-side timeout that ran out while the request was decided would.
func expired(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithDeadline(r.Context(), time.Unix(0, 0))
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// faultStore is a store and the limit that the middleware applies through
// it.
type faultStore struct {
	name  string
	limit funnel.Limit
	store *fakeStore
}

// faultStores are stores whose answer comes after the request's context
// has ended: while the store is asked, or while an admitted request waits
// its leaky bucket's delay. entered receives once the store has been
// asked.
func faultStores(entered chan<- struct{}) []faultStore {
	// blocked waits for the request's context to end and returns err, or
	// the context's error when err is nil.
	blocked := func(err error) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			entered <- struct{}{}
			<-ctx.Done()
			if err != nil {
				return err
			}
			return ctx.Err()
		}
	}
	deciding := func(err error) *fakeStore {
		wait := blocked(err)
		return &fakeStore{throttle: func(ctx context.Context, _ string) (funnel.Result, error) {
			return funnel.Result{}, wait(ctx)
		}}
	}
	return []faultStore{
		{"deciding", funnel.PerMinute(1), deciding(nil)},
		// A store whose error does not wrap the context's, although the
		// context has ended: the request is not the store's failure.
		{"deciding store error", funnel.PerMinute(1), deciding(errDown)},
		{"delayed", funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4},
			&fakeStore{do: func(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
				if ops[0].Kind == funnel.OpRefund {
					// The units of a request that left while it waited
					// come back.
					res[0] = funnel.Result{Allowed: true, Limit: 5, Remaining: 3}
					return nil
				}
				res[0] = funnel.Result{Allowed: true, Limit: 5, Remaining: 2, Delay: time.Hour, ResetAfter: time.Second}
				entered <- struct{}{}
				return nil
			}}},
	}
}

// failModes are the middleware's answers to a store that cannot decide;
// none of them applies to a request whose context has ended.
var failModes = []struct {
	name string
	opt  httplimit.Option
}{
	{"fail open", httplimit.Fail(funnel.FailOpen)},
	{"fail closed", httplimit.Fail(funnel.FailClosed)},
	{"on store error", httplimit.OnStoreError(func(w http.ResponseWriter, r *http.Request, next http.Handler, _ error) {
		next.ServeHTTP(w, r)
	})},
}

// TestClientGone: a request whose client goes away before it is decided,
// or while it waits its delay, is written 499 as a problem, never left
// without a status (which net/http sends as 200), and the wrapped handler
// does not run.
func TestClientGone(t *testing.T) {
	for _, mode := range failModes {
		entered := make(chan struct{}, 1)
		for _, c := range faultStores(entered) {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				var ran atomic.Int32
				app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran.Add(1) })
				h, got := recording(newMW(t, funnel.New(c.store), c.limit, httplimit.ClientIP(), mode.opt)(app))
				srv := serve(t, func(http.Handler) http.Handler { return h }, nil)

				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				errc := make(chan error, 1)
				go func() {
					resp, err := srv.Client().Do(req)
					if err == nil {
						resp.Body.Close()
					}
					errc <- err
				}()
				<-entered
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("client: want its cancellation, got %v", err)
				}
				w := <-got
				if w.status != 499 || w.contentType != httpreply.ProblemContentType {
					t.Errorf("written %d %q, want 499 %s", w.status, w.contentType, httpreply.ProblemContentType)
				}
				if ran.Load() != 0 {
					t.Error("the handler ran for a client that had gone")
				}
			})
		}
	}
}

// TestDeadlinePassed: a request whose own deadline passes before it is
// decided, or while it waits its delay, is answered 503 as a problem, not an
// empty 200, and the wrapped handler does not run.
func TestDeadlinePassed(t *testing.T) {
	for _, mode := range failModes {
		entered := make(chan struct{}, 1)
		for _, c := range faultStores(entered) {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				var ran atomic.Int32
				app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran.Add(1) })
				mw := newMW(t, funnel.New(c.store), c.limit, httplimit.ClientIP(), mode.opt)
				srv := serve(t, func(h http.Handler) http.Handler { return expired(mw(h)) }, app)
				r := get(t, srv)
				<-entered
				if r.status != http.StatusServiceUnavailable || r.problem.Status != http.StatusServiceUnavailable {
					t.Errorf("%d %q %+v, want a 503 problem", r.status, r.body, r.problem)
				}
				if ran.Load() != 0 {
					t.Error("the handler ran after the request's deadline")
				}
			})
		}
	}
}
