package httplimit_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/memstore"
)

// clock is a fake clock for memstore, in ns since the Unix epoch.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() int64          { return c.ns.Load() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func quiet() *slog.Logger            { return slog.New(slog.DiscardHandler) }
func okHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
}
func memLimiter(t *testing.T, c *clock) *funnel.Limiter {
	s := memstore.New(memstore.Options{Now: c.now})
	t.Cleanup(func() { s.Close() })
	return funnel.New(s)
}

// serve starts app behind mw on 127.0.0.1:0.
func serve(t *testing.T, mw func(http.Handler) http.Handler, app http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(mw(app))
	t.Cleanup(srv.Close)
	return srv
}

func newMW(t *testing.T, lim *funnel.Limiter, limit funnel.Limit, key httplimit.KeyFunc, opts ...httplimit.Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httplimit.New(lim, limit, key, append([]httplimit.Option{httplimit.Logger(quiet())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

type reply struct {
	status  int
	header  http.Header
	body    string
	problem httpreply.Problem
}

func get(t *testing.T, srv *httptest.Server, headers ...string) reply {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/", nil)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("problem body %q: %v", b, err)
		}
	}
	return r
}

func TestAllowRefuseRecover(t *testing.T) {
	c := newClock()
	limit := funnel.PerMinute(30).WithBurst(2) // 3 at once, then one each 2 s
	srv := serve(t, newMW(t, memLimiter(t, c), limit, httplimit.ClientIP(), httplimit.Name("per-ip")), okHandler())

	for i, want := range []string{`"per-ip";r=2;t=2`, `"per-ip";r=1;t=4`, `"per-ip";r=0;t=6`} {
		r := get(t, srv)
		if r.status != 200 || r.body != "ok\n" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
		if got := r.header.Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %s, want %s", i, got, want)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"per-ip";q=3;w=6` {
			t.Errorf("request %d: RateLimit-Policy %s", i, got)
		}
		if r.header.Get("Retry-After") != "" {
			t.Errorf("request %d: Retry-After on a 200", i)
		}
	}

	r := get(t, srv)
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d", r.status)
	}
	if got := r.header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After %q, want 2", got)
	}
	if got := r.header.Get("RateLimit"); got != `"per-ip";r=0;t=2` {
		t.Errorf("RateLimit %s", got)
	}
	want := httpreply.Problem{
		Type:             "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:            "Quota Exceeded",
		Status:           429,
		Detail:           "retry in 2 s",
		ViolatedPolicies: []string{"per-ip"},
	}
	if fmt.Sprint(r.problem) != fmt.Sprint(want) {
		t.Errorf("problem %+v\nwant %+v", r.problem, want)
	}

	c.add(2 * time.Second)
	if r := get(t, srv); r.status != 200 {
		t.Errorf("after 2 s: %d", r.status)
	}
}

func TestKeysAreSeparate(t *testing.T) {
	lim := memLimiter(t, newClock())
	srv := serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.Header("X-Api-Key"), httplimit.Prefix("k:")), okHandler())
	if r := get(t, srv, "X-Api-Key", "a"); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "X-Api-Key", "a"); r.status != 429 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "X-Api-Key", "b"); r.status != 200 {
		t.Fatal(r.status)
	}
	// The prefix is part of the key in the store.
	res, err := lim.Peek(context.Background(), "k:a", funnel.PerMinute(1))
	if err != nil || res.Remaining != 0 {
		t.Errorf("k:a: %+v %v", res, err)
	}
}

func TestNoKey(t *testing.T) {
	lim := memLimiter(t, newClock())
	srv := serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.Header("X-Api-Key")), okHandler())
	r := get(t, srv)
	if r.status != 400 || r.problem.Status != 400 || r.problem.Type != "about:blank" || r.problem.Title != "Bad Request" {
		t.Errorf("no key: %d %+v", r.status, r.problem)
	}
	srv = serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.Header("X-Api-Key"), httplimit.SkipNoKey()), okHandler())
	for range 3 {
		if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit") != "" {
			t.Errorf("SkipNoKey: %d %v", r.status, r.header)
		}
	}
}

func TestSkip(t *testing.T) {
	lim := memLimiter(t, newClock())
	mw := newMW(t, lim, funnel.PerMinute(1), httplimit.ClientIP(),
		httplimit.Skip(func(r *http.Request) bool { return r.Header.Get("X-Health") != "" }))
	srv := serve(t, mw, okHandler())
	for range 3 {
		if r := get(t, srv, "X-Health", "1"); r.status != 200 {
			t.Fatal(r.status)
		}
	}
	if r := get(t, srv); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv); r.status != 429 {
		t.Fatal(r.status)
	}
}

func TestQuantity(t *testing.T) {
	lim := memLimiter(t, newClock())
	mw := newMW(t, lim, funnel.PerSecond(10), httplimit.ClientIP(),
		httplimit.Quantity(func(r *http.Request) int64 {
			var n int64
			fmt.Sscan(r.Header.Get("X-Cost"), &n)
			return n
		}))
	srv := serve(t, mw, okHandler())
	if r := get(t, srv, "X-Cost", "7"); r.status != 200 || r.header.Get("RateLimit") != `"default";r=3;t=1` {
		t.Fatalf("%d %s", r.status, r.header.Get("RateLimit"))
	}
	if r := get(t, srv, "X-Cost", "4"); r.status != 429 || r.header.Get("RateLimit") != `"default";r=3;t=1` {
		t.Fatalf("%d %s", r.status, r.header.Get("RateLimit"))
	}
	// More than the limit at once: refused for good, no Retry-After.
	r := get(t, srv, "X-Cost", "11")
	if r.status != 429 || r.header.Get("Retry-After") != "" || r.problem.Detail != "the request asks for more than the limit admits at once" {
		t.Fatalf("%d %v %+v", r.status, r.header, r.problem)
	}
	// A negative cost is a bug: 500, and nothing of the error is sent.
	r = get(t, srv, "X-Cost", "-1")
	if r.status != 500 || r.problem.Status != 500 || r.problem.Detail != "" {
		t.Fatalf("negative cost: %d %+v", r.status, r.problem)
	}
}

func TestNoHeadersAndOnLimited(t *testing.T) {
	lim := memLimiter(t, newClock())
	mw := newMW(t, lim, funnel.PerMinute(1), httplimit.ClientIP(), httplimit.NoHeaders(),
		httplimit.OnLimited(func(w http.ResponseWriter, _ *http.Request, res funnel.Result) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "slow down for %v\n", res.RetryAfter)
		}))
	srv := serve(t, mw, okHandler())
	if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
		t.Fatalf("%d %v", r.status, r.header)
	}
	r := get(t, srv)
	if r.status != 503 || r.body != "slow down for 1m0s\n" || r.header.Get("Retry-After") != "60" || r.header.Get("RateLimit") != "" {
		t.Fatalf("%d %q %v", r.status, r.body, r.header)
	}
}

func TestNewErrors(t *testing.T) {
	lim := memLimiter(t, newClock())
	if _, err := httplimit.New(lim, funnel.Limit{}, httplimit.ClientIP()); !errors.Is(err, funnel.ErrInvalidLimit) {
		t.Errorf("zero limit: %v", err)
	}
	if _, err := httplimit.New(lim, funnel.PerSecond(1), httplimit.ClientIP(), httplimit.Name("é")); !errors.Is(err, httplimit.ErrPolicyName) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := httplimit.New(nil, funnel.PerSecond(1), httplimit.ClientIP()); err == nil {
		t.Error("nil limiter: no error")
	}
	if _, err := httplimit.New(lim, funnel.PerSecond(1), nil); err == nil {
		t.Error("nil key: no error")
	}
}

// fakeStore answers as the test says: throttle for one funnel decision
// without a ban (when set), do for every other call.
type fakeStore struct {
	throttle func(ctx context.Context, key string) (funnel.Result, error)
	do       func(ctx context.Context, ops []funnel.Op, res []funnel.Result) error
}

func (f *fakeStore) Reset(context.Context, string) (bool, error) { return false, nil }
func (f *fakeStore) TTL(context.Context, string) (time.Duration, bool, error) {
	return 0, false, nil
}
func (f *fakeStore) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	if op := ops[0]; f.throttle != nil && len(ops) == 1 && op.Kind == funnel.OpTake && op.Limit.Algorithm == funnel.GCRA && op.Limit.Ban == 0 {
		var err error
		res[0], err = f.throttle(ctx, op.Key)
		return err
	}
	return f.do(ctx, ops, res)
}
func (f *fakeStore) Bans(context.Context) ([]funnel.Ban, error)  { return nil, nil }
func (f *fakeStore) Unban(context.Context, string) (bool, error) { return false, nil }

var errDown = fmt.Errorf("redisstore: dial tcp 10.1.2.3:6379: connection refused: %w", funnel.ErrUnavailable)

func downStore() *fakeStore {
	return &fakeStore{
		throttle: func(context.Context, string) (funnel.Result, error) { return funnel.Result{}, errDown },
		do:       func(context.Context, []funnel.Op, []funnel.Result) error { return errDown },
	}
}

func TestStoreDown(t *testing.T) {
	lim := funnel.New(downStore())
	var mu sync.Mutex
	var seen []string
	observe := httplimit.Observe(func(r funnel.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("allowed=%v fallback=%v err=%v", r.Allowed, r.Fallback, err != nil))
	})

	// Fail open: served, with the policy but no state.
	srv := serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.ClientIP(), observe, httplimit.Fail(funnel.FailOpen)), okHandler())
	r := get(t, srv)
	if r.status != 200 || r.body != "ok\n" {
		t.Fatalf("fail open: %d %q", r.status, r.body)
	}
	if r.header.Get("RateLimit-Policy") != `"default";q=1;w=60` || r.header.Get("RateLimit") != "" {
		t.Errorf("fail open headers: %v", r.header)
	}

	// Fail closed, the default of every edge (the middleware failed open
	// by default before): 503, and the store's error is not sent.
	for _, opts := range [][]httplimit.Option{{observe}, {observe, httplimit.Fail(funnel.FailClosed)}} {
		srv = serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.ClientIP(), opts...), okHandler())
		r = get(t, srv)
		if r.status != 503 || r.problem.Status != 503 || r.problem.Type != httpreply.TypeTemporaryReducedCapacity || r.header.Get("Retry-After") != "1" {
			t.Fatalf("fail closed: %d %+v", r.status, r.problem)
		}
		if r.problem.Detail != "the rate limiter is unavailable" {
			t.Errorf("fail closed detail %q", r.problem.Detail)
		}
	}

	// Custom.
	srv = serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.ClientIP(), observe,
		httplimit.OnStoreError(func(w http.ResponseWriter, r *http.Request, next http.Handler, err error) {
			if !errors.Is(err, funnel.ErrUnavailable) {
				t.Errorf("OnStoreError got %v", err)
			}
			w.Header().Set("X-Degraded", "1")
			next.ServeHTTP(w, r)
		})), okHandler())
	r = get(t, srv)
	if r.status != 200 || r.header.Get("X-Degraded") != "1" {
		t.Fatalf("custom: %d %v", r.status, r.header)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []string{"allowed=true fallback=true err=false", "allowed=false fallback=true err=false", "allowed=false fallback=true err=false", "allowed=false fallback=false err=true"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("observed %q\nwant %q", seen, want)
	}
}

// A store that answers Fallback on its own is obeyed both ways.
func TestStoreFallback(t *testing.T) {
	var closed atomic.Bool
	st := &fakeStore{throttle: func(context.Context, string) (funnel.Result, error) {
		return funnel.Result{Allowed: !closed.Load(), Fallback: true, Limit: 1}, nil
	}}
	srv := serve(t, newMW(t, funnel.New(st), funnel.PerMinute(1), httplimit.ClientIP(), httplimit.Fail(funnel.FailClosed)), okHandler())
	if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Fatalf("store fail open: %d %v", r.status, r.header)
	}
	closed.Store(true)
	if r := get(t, srv); r.status != 503 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("store fail closed: %d %v", r.status, r.header)
	}
}

func TestBanned(t *testing.T) {
	st := &fakeStore{do: func(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
		res[0] = funnel.Result{Banned: true, Limit: 5, RetryAfter: 90 * time.Second, ResetAfter: 90 * time.Second}
		return nil
	}}
	limit := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Minute, Ban: time.Hour}
	srv := serve(t, newMW(t, funnel.New(st), limit, httplimit.ClientIP()), okHandler())
	r := get(t, srv)
	if r.status != 429 || r.header.Get("Retry-After") != "90" || r.header.Get("RateLimit") != `"default";r=0;t=90` {
		t.Fatalf("%d %v", r.status, r.header)
	}
	if r.problem.Type != httpreply.TypeAbnormalUsageDetected || r.problem.Detail != "banned; retry in 90 s" {
		t.Errorf("%+v", r.problem)
	}
}

// A leaky bucket's delay holds the request back before the handler runs;
// a client that gives up while waiting does not reach the handler. The test
// runs in a synctest bubble: the delays pass on its fake clock, at once.
func TestLeakyBucketDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 80 * time.Millisecond
		var wait atomic.Int64
		wait.Store(int64(delay))
		st := &fakeStore{do: func(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
			res[0] = funnel.Result{Allowed: true, Limit: 5, Remaining: 2, Delay: time.Duration(wait.Load()), ResetAfter: time.Second}
			return nil
		}}
		var ran atomic.Int32
		app := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { ran.Add(1) })
		limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4}
		h := newMW(t, funnel.New(st), limit, httplimit.ClientIP())(app)
		start := time.Now()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			t.Fatal(rec.Code)
		}
		if d := time.Since(start); d != delay {
			t.Errorf("served after %v, want the delay %v", d, delay)
		}
		if ran.Load() != 1 {
			t.Fatal("handler not run")
		}

		wait.Store(int64(time.Hour))
		const patience = 50 * time.Millisecond
		ctx, cancel := context.WithTimeout(t.Context(), patience)
		defer cancel()
		start = time.Now()
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, "GET", "/", nil))
		if d := time.Since(start); d != patience {
			t.Errorf("gave up after %v, want the request's deadline %v", d, patience)
		}
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("a request whose deadline passed while it waited: %d, want 503", rec.Code)
		}
		if ran.Load() != 1 {
			t.Error("the handler ran for a client that had gone")
		}
	})
}

// A concurrency limit holds a lease while the handler runs.
func TestConcurrencyLease(t *testing.T) {
	var mu sync.Mutex
	held := map[string]bool{}
	st := &fakeStore{do: func(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
		mu.Lock()
		defer mu.Unlock()
		op := ops[0]
		switch op.Kind {
		case funnel.OpTake:
			if len(held) >= 1 {
				res[0] = funnel.Result{Limit: 1, RetryAfter: 30 * time.Second, ResetAfter: 30 * time.Second}
				return nil
			}
			held[op.Lease] = true
			res[0] = funnel.Result{Allowed: true, Limit: 1, ResetAfter: 30 * time.Second}
		case funnel.OpRefund:
			res[0] = funnel.Result{Allowed: held[op.Lease]}
			delete(held, op.Lease)
		}
		return nil
	}}
	limit := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: 30 * time.Second}
	entered, release := make(chan struct{}), make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	})
	srv := serve(t, newMW(t, funnel.New(st), limit, httplimit.ClientIP()), app)
	done := make(chan int)
	go func() {
		resp, err := srv.Client().Get(srv.URL + "/slow")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-entered
	r := get(t, srv)
	if r.status != 429 || r.header.Get("RateLimit-Policy") != `"default";q=1;qu="concurrent-requests"` {
		t.Fatalf("second concurrent request: %d %v", r.status, r.header)
	}
	close(release)
	if s := <-done; s != 200 {
		t.Fatalf("slow request: %d", s)
	}
	if r := get(t, srv); r.status != 200 {
		t.Fatalf("after release: %d", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(held) != 0 {
		t.Errorf("leases still held: %v", held)
	}
}

// A key longer than MaxKeyLen is hashed: the store never holds a client's
// megabyte of header.
func TestLongKeyHashed(t *testing.T) {
	lim := memLimiter(t, newClock())
	srv := serve(t, newMW(t, lim, funnel.PerMinute(1), httplimit.Header("X-Api-Key"), httplimit.Prefix("k:")), okHandler())
	long := strings.Repeat("x", 10000)
	if r := get(t, srv, "X-Api-Key", long); r.status != 200 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "X-Api-Key", long); r.status != 429 {
		t.Fatal(r.status)
	}
	if r := get(t, srv, "X-Api-Key", long+"y"); r.status != 200 {
		t.Fatal("another long key shares the bucket", r.status)
	}
	sum := sha256.Sum256([]byte(long))
	res, err := lim.Peek(context.Background(), "k:sha256:"+hex.EncodeToString(sum[:]), funnel.PerMinute(1))
	if err != nil || res.Remaining != 0 {
		t.Errorf("hashed key: %+v %v", res, err)
	}
}
