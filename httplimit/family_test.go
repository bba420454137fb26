package httplimit_test

// The limiter family behind the middleware, over the memory store.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/internal/httpreply"
)

func TestMemstoreConcurrency(t *testing.T) {
	lim := memLimiter(t, newClock())
	limit := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute}
	entered, release := make(chan struct{}), make(chan struct{})
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	})
	srv := serve(t, newMW(t, lim, limit, httplimit.ClientIP()), app)
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
	if r := get(t, srv); r.status != 429 || r.header.Get("Retry-After") != "60" {
		t.Fatalf("while a lease is held: %d %v", r.status, r.header)
	}
	close(release)
	if s := <-done; s != 200 {
		t.Fatalf("slow request: %d", s)
	}
	for range 3 { // released after each request
		if r := get(t, srv); r.status != 200 {
			t.Fatalf("after the release: %d", r.status)
		}
	}
}

func TestMemstoreBan(t *testing.T) {
	c := newClock()
	limit := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Minute, Ban: time.Hour}
	srv := serve(t, newMW(t, memLimiter(t, c), limit, httplimit.ClientIP(), httplimit.Name("login")), okHandler())
	if r := get(t, srv); r.status != 200 || r.header.Get("RateLimit-Policy") != `"login";q=1;w=60` {
		t.Fatalf("%d %v", r.status, r.header)
	}
	if r := get(t, srv); r.status != 429 {
		t.Fatalf("overflow: %d", r.status)
	}
	c.add(2 * time.Minute)
	r := get(t, srv)
	if r.status != 429 || r.problem.Type != httpreply.TypeAbnormalUsageDetected || r.header.Get("Retry-After") != "3480" {
		t.Fatalf("banned: %d %v %+v", r.status, r.header, r.problem)
	}
	if r.problem.Title != "Abnormal Usage Detected" || r.problem.Detail != "banned; retry in 3480 s" || r.problem.ViolatedPolicies[0] != "login" {
		t.Errorf("%+v", r.problem)
	}
}

func TestMemstoreLeakyBucket(t *testing.T) {
	// 20 per second (50 ms apart), burst 3, no excess passes at once: the
	// second request waits 50 ms before the handler runs. The wait passes on
	// the synctest bubble's fake clock.
	synctest.Test(t, func(t *testing.T) {
		limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 20, Period: time.Second, Burst: 3}
		h := newMW(t, memLimiter(t, newClock()), limit, httplimit.ClientIP())(okHandler())
		serveOne := func() int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			return rec.Code
		}
		begin := time.Now()
		if code := serveOne(); code != 200 {
			t.Fatal(code)
		}
		if d := time.Since(begin); d != 0 {
			t.Errorf("the first request waited %v", d)
		}
		begin = time.Now()
		if code := serveOne(); code != 200 {
			t.Fatal(code)
		}
		if d := time.Since(begin); d != 50*time.Millisecond {
			t.Errorf("the delayed request was served after %v, want 50ms", d)
		}
	})
}

// A request that leaves while it waits its turn in a leaky bucket gives its
// units back, as Limiter.Wait does: the next request finds the bucket as
// the first one left it. The wait passes on the synctest bubble's clock.
func TestMemstoreLeakyBucketLeavesWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 20, Period: time.Second, Burst: 3}
		lim := memLimiter(t, newClock())
		h := newMW(t, lim, limit, httplimit.ClientIP())(okHandler())
		serveOne := func(ctx context.Context) int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			return rec.Code
		}
		if code := serveOne(context.Background()); code != 200 {
			t.Fatal(code)
		}
		before, err := lim.Peek(context.Background(), "192.0.2.1", limit)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(10 * time.Millisecond) // within the 50 ms it must wait
			cancel()
		}()
		serveOne(ctx)
		after, err := lim.Peek(context.Background(), "192.0.2.1", limit)
		if err != nil {
			t.Fatal(err)
		}
		if after.Remaining != before.Remaining || after.ResetAfter != before.ResetAfter {
			t.Errorf("after a request that left while waiting: %+v; before it: %+v", after, before)
		}
	})
}

// A concurrency limit that queues (limit.conn): one request at once, two
// more wait; the handler's latency, reported on release, moves the delay.
// Time passes on the synctest bubble's fake clock.
func TestMemstoreConcurrencyQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := memLimiter(t, newClock())
		limit := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute, Burst: 2, UnitDelay: 100 * time.Millisecond}
		hold := make(chan struct{})
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/hold":
				<-hold
			case "/slow":
				time.Sleep(300 * time.Millisecond)
			}
		})
		h := newMW(t, lim, limit, httplimit.ClientIP())(app)
		serveOne := func(path string) (int, time.Duration) {
			begin := time.Now()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			return rec.Code, time.Since(begin)
		}
		held := make(chan int)
		go func() { code, _ := serveOne("/hold"); held <- code }()
		synctest.Wait() // the first request holds the one lease
		// The second waits one unit, 100ms, then takes 300ms.
		if code, took := serveOne("/slow"); code != 200 || took != 400*time.Millisecond {
			t.Fatalf("queued request: %d after %v, want 200 after 400ms", code, took)
		}
		// Its latency moved the unit delay to (100ms + 300ms) / 2.
		if code, took := serveOne("/"); code != 200 || took != 200*time.Millisecond {
			t.Errorf("after the latency: %d after %v, want 200 after 200ms", code, took)
		}
		// The client's key holds the first request's lease only, and the
		// last one took no time: the unit delay is (200ms + 1ns) / 2.
		l, res, err := lim.Acquire(t.Context(), "192.0.2.1", limit)
		if err != nil || res.Delay != 100*time.Millisecond || res.Remaining != 1 {
			t.Errorf("beside the first request: %+v %v", res, err)
		}
		lim.Release(t.Context(), l)
		close(hold)
		if code := <-held; code != 200 {
			t.Fatalf("first request: %d", code)
		}
		_, res, err = lim.Acquire(t.Context(), "192.0.2.1", limit)
		if err != nil || !res.Allowed || res.Delay != 0 || res.Remaining != 2 {
			t.Errorf("after the requests: %+v %v", res, err)
		}
	})
}
