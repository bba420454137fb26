package redisstore_test

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// logCounter is a slog.Handler that keeps the warnings and errors it is
// given: the records of failures.
type logCounter struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *logCounter) WithGroup(string) slog.Handler                { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

func (h *logCounter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

func (h *logCounter) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.records) == 0 {
		return ""
	}
	r := h.records[len(h.records)-1]
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	return s
}

// waitFor polls cond until it holds or the deadline passes (the store under
// test talks to a real process: there is no clock to move).
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// settleGoroutines waits until no more goroutines run than before: the
// client's connection goroutines and timers end by themselves.
func settleGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settleClients waits until no more goroutines run than before, but for
// those of the stores' open clients' connections; then closes the clients and
// waits until no more run than at baseline, before they were opened: the
// store leaves nothing behind, and neither does the client once closed.
func settleClients(t *testing.T, oc outageClient, before, baseline int, closers ...func()) {
	t.Helper()
	settleGoroutines(t, before+len(closers)*oc.conns*oc.connGoroutines)
	for _, close := range closers {
		close()
	}
	settleGoroutines(t, baseline)
}

func openStore(t *testing.T, url string, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// outageClient is a client library the outage tests run the store on.
type outageClient struct {
	name string
	// open returns a store on the Redis at addr through a client of its own,
	// and a function that closes that client (also closed when the test
	// ends).
	open func(t *testing.T, addr string, opts redisstore.Options) (*redisstore.Store, func())
	// conns is the most connections that client keeps to one Redis, and
	// connGoroutines the most goroutines it runs for each while it is open.
	conns, connGoroutines int
}

var outageClients = []outageClient{
	{"go-redis", func(t *testing.T, addr string, opts redisstore.Options) (*redisstore.Store, func()) {
		s := openStore(t, "redis://"+addr+"?pool_size=8", opts)
		return s, func() { s.Close() }
	}, 8, 0},
	{"rueidis", func(t *testing.T, addr string, opts redisstore.Options) (*redisstore.Store, func()) {
		// Four pipelined connections (PipelineMultiplex 2, the default),
		// each with a reading and a writing goroutine once callers share it.
		c := newRueidis(t, addr)
		return redisstore.NewRueidis(c, opts), c.Close
	}, 4, 2},
}

// runOutage runs test once for each client library, one after the other
// (the tests count the process's goroutines).
func runOutage(t *testing.T, test func(t *testing.T, oc outageClient)) {
	for _, oc := range outageClients {
		t.Run(oc.name, func(t *testing.T) { test(t, oc) })
	}
}

// runOutagePaths runs test with each client on each path of the funnel's
// decisions: the script, and Funnel's module.
func runOutagePaths(t *testing.T, test func(t *testing.T, oc outageClient, path redisstore.FunnelPath)) {
	for _, path := range redisstore.FunnelPaths {
		t.Run(path.Name, func(t *testing.T) {
			runOutage(t, func(t *testing.T, oc outageClient) { test(t, oc, path) })
		})
	}
}

// With Redis down, Throttle answers the policy at once with Fallback set and
// no error, logs once a second at most, Reset and TTL fail with
// ErrUnavailable; when Redis is back, decisions resume by themselves.
func TestFallbackWhenDown(t *testing.T) { runOutage(t, testFallbackWhenDown) }

func testFallbackWhenDown(t *testing.T, oc outageClient) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	p := mkParams(t, 9, 1, time.Second)
	logs := &logCounter{}
	baseline := runtime.NumGoroutine()
	closed, closeClosed := oc.open(t, srv.Addr, redisstore.Options{Logger: slog.New(logs)})
	open, closeOpen := oc.open(t, srv.Addr, redisstore.Options{Logger: slog.New(logs), Fail: funnel.FailOpen})
	for _, s := range []*redisstore.Store{closed, open} {
		// With Redis up a decision is made; on a loaded machine one may
		// fall back within the default 100 ms, so it is asked again.
		eventually.True(t, "a decision with Redis up", func() bool {
			r, err := storetest.Throttle(ctx, s, "k", p, 1)
			if err != nil {
				t.Fatalf("Redis up: %v", err)
			}
			return !r.Fallback
		})
	}
	before := runtime.NumGoroutine()

	srv.Stop()
	start := time.Now()
	for i := 0; i < 200; i++ {
		for _, s := range []*redisstore.Store{closed, open} {
			r, err := storetest.Throttle(ctx, s, "k", p, 1)
			want := funnel.Result{Fallback: true, Allowed: s == open, Limit: p.Limit}
			if err != nil || r != want {
				t.Fatalf("Redis down: %+v, %v; want %+v", r, err, want)
			}
		}
	}
	elapsed := time.Since(start)
	if n := logs.count(); n < 1 || n > 2*(1+int(elapsed/time.Second)) {
		t.Fatalf("%d log records for 400 failures in %v", n, elapsed)
	}
	t.Logf("400 fallbacks in %v, %d log records; last: %s", elapsed, logs.count(), logs.last())
	if closed.Fallbacks() != 200 || open.Fallbacks() != 200 {
		t.Fatalf("Fallbacks() = %d, %d; want 200", closed.Fallbacks(), open.Fallbacks())
	}
	if _, err := closed.Reset(ctx, "k"); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Reset with Redis down: %v", err)
	}
	if _, _, err := closed.TTL(ctx, "k"); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("TTL with Redis down: %v", err)
	}
	// The rest of the family answers the same policy; what is not a
	// decision fails with ErrUnavailable.
	window := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Second}
	for _, s := range []*redisstore.Store{closed, open} {
		lim := funnel.New(s)
		r, err := lim.Allow(ctx, "f", window)
		if want := (funnel.Result{Fallback: true, Allowed: s == open, Limit: 5}); err != nil || r != want {
			t.Fatalf("a fixed window with Redis down: %+v, %v; want %+v", r, err, want)
		}
		m, err := lim.AllowAll(ctx, []funnel.Request{{Key: "{m}1", Limit: window, N: 1}, {Key: "{m}2", Limit: funnel.PerSecond(1), N: 1}})
		if err != nil || m.Allowed != (s == open) || !m.Results[0].Fallback || !m.Results[1].Fallback {
			t.Fatalf("AllowAll with Redis down: %+v, %v", m, err)
		}
	}
	// An acquire is a decision; a release is not.
	conc := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Second}
	for _, s := range []*redisstore.Store{closed, open} {
		_, r, err := funnel.New(s).AcquireID(ctx, "c", conc, "id")
		if want := (funnel.Result{Fallback: true, Allowed: s == open, Limit: 2}); err != nil || r != want {
			t.Fatalf("an acquire with Redis down: %+v, %v; want %+v", r, err, want)
		}
	}
	if _, err := funnel.New(open).Release(ctx, funnel.Lease{Key: "c", ID: "id"}); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("a release with Redis down: %v", err)
	}
	lim := funnel.New(closed)
	if err := lim.Refund(ctx, "f", window, 1); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Refund with Redis down: %v", err)
	}
	// A charge records what was spent: it is not a decision, and a lost
	// one is said so.
	if r, err := lim.Charge(ctx, "f", window, 1); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Charge with Redis down: %+v, %v", r, err)
	}
	if r, err := lim.PeekN(ctx, "f", window, 1); err != nil || r != (funnel.Result{Fallback: true, Limit: 5}) {
		t.Fatalf("PeekN with Redis down: %+v, %v", r, err)
	}
	if _, err := lim.Bans(ctx); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Bans with Redis down: %v", err)
	}
	if _, err := lim.Unban(ctx, "f"); !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("Unban with Redis down: %v", err)
	}

	srv.MustStart() // same port, empty
	for _, s := range []*redisstore.Store{closed, open} {
		waitFor(t, "decisions resume", 10*time.Second, func() bool {
			r, err := storetest.Throttle(ctx, s, "k", p, 1)
			return err == nil && !r.Fallback && r.Allowed
		})
		var r funnel.Result
		eventually.True(t, "a fixed window decided with Redis back", func() bool {
			var err error
			if r, err = funnel.New(s).Allow(ctx, "f", window); err != nil {
				t.Fatalf("a fixed window with Redis back: %v", err)
			}
			return !r.Fallback
		})
		if !r.Allowed {
			t.Fatalf("a fixed window with Redis back: %+v", r)
		}
	}
	settleClients(t, oc, before, baseline, closeClosed, closeOpen)
}

// A Redis that hangs (SIGSTOP) is the timeout's case: each decision falls
// back after the store's timeout, and resumes when Redis does.
func TestTimeoutWhenPaused(t *testing.T) { runOutagePaths(t, testTimeoutWhenPaused) }

func testTimeoutWhenPaused(t *testing.T, oc outageClient, path redisstore.FunnelPath) {
	srv := path.Start(t)
	ctx := context.Background()
	p := mkParams(t, 9, 1, time.Second)
	baseline := runtime.NumGoroutine()
	s, closeS := oc.open(t, srv.Addr, redisstore.Options{Timeout: 50 * time.Millisecond, Logger: slog.New(&logCounter{})})
	patient, closePatient := oc.open(t, srv.Addr, redisstore.Options{Timeout: 10 * time.Second})
	// Redis up: the patient store decides at once; the impatient one may
	// fall back on a loaded machine (50 ms), so it is asked until it
	// decides (fallbacks charge nothing).
	if r, err := storetest.Throttle(ctx, patient, "k", p, 1); err != nil || r.Fallback {
		t.Fatalf("Redis up: %+v, %v", r, err)
	}
	eventually.True(t, "a decision with Redis up", func() bool {
		r, err := storetest.Throttle(ctx, s, "k", p, 1)
		if err != nil {
			t.Fatalf("Redis up: %v", err)
		}
		return !r.Fallback
	})
	before := runtime.NumGoroutine()
	srv.Pause()
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for w := 0; w < 32; w++ { // enough to queue behind the batches in flight
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Arrivals spread over a timeout, so that decisions queue
			// while batches are in flight, not only when they leave.
			time.Sleep(time.Duration(w) * 50 * time.Millisecond / 32)
			for i := 0; i < 3; i++ {
				start := time.Now()
				r, err := storetest.Throttle(ctx, s, "k", p, 1)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
				if err != nil || !r.Fallback || r.Allowed {
					t.Errorf("Redis paused: %+v, %v", r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// 50 ms at most, the wait in the queue and the batch's call together,
	// plus the scheduling of a loaded test machine under -race (1.13 s
	// once): far below the client's own read timeout (5 s), which is what
	// a decision would wait without the store's bound.
	t.Logf("96 decisions on a paused Redis, timeout 50ms: the slowest fell back after %v", time.Duration(slowest.Load()))
	if d := time.Duration(slowest.Load()); d > 3*time.Second {
		t.Errorf("slowest decision took %v with a 50ms timeout", d)
	}
	// The key operations are bounded by the timeout as well.
	lim := funnel.New(s)
	for name, op := range map[string]func() error{
		"Reset": func() error { _, err := lim.Reset(ctx, "k"); return err },
		"TTL":   func() error { _, _, err := lim.TTL(ctx, "k"); return err },
		"Unban": func() error { _, err := lim.Unban(ctx, "k"); return err },
	} {
		start := time.Now()
		if err := op(); !errors.Is(err, funnel.ErrUnavailable) {
			t.Errorf("%s on a paused Redis: %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s on a paused Redis took %v with a 50ms timeout", name, d)
		}
	}
	// The caller's own deadline is not an outage: its error is returned.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if r, err := storetest.Throttle(short, patient, "k", p, 1); !errors.Is(err, context.DeadlineExceeded) || r.Fallback {
		t.Errorf("caller's deadline: %+v, %v; want context.DeadlineExceeded", r, err)
	}
	srv.Resume()
	waitFor(t, "decisions resume", 10*time.Second, func() bool {
		r, err := storetest.Throttle(ctx, s, "k", p, 0)
		return err == nil && !r.Fallback
	})
	settleClients(t, oc, before, baseline, closeS, closePatient)
}

// Redis is stopped and started again (same port) while 16 goroutines make
// decisions: no error ever, fallbacks only while it is down, bounded
// latency, no goroutine or connection left behind, and decisions resume.
func TestRestartUnderLoad(t *testing.T) { runOutagePaths(t, testRestartUnderLoad) }

func testRestartUnderLoad(t *testing.T, oc outageClient, path redisstore.FunnelPath) {
	srv := path.Start(t)
	ctx := context.Background()
	p := mkParams(t, 1000, 1000, time.Second)
	logs := &logCounter{}
	baseline := runtime.NumGoroutine()
	s, closeS := oc.open(t, srv.Addr, redisstore.Options{Logger: slog.New(logs)})
	// Every key of the test once, so that a client that sends a key always
	// on the same connection (rueidis) has them all open.
	for w := 0; w < 4; w++ {
		if _, err := storetest.Throttle(ctx, s, "user:"+strconv.Itoa(w), p, 1); err != nil {
			t.Fatal(err)
		}
	}
	before := runtime.NumGoroutine()

	var ok, fallback, errs, slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			key := "user:" + strconv.Itoa(w%4)
			for i := 0; i < 1_000_000; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r, err := storetest.Throttle(ctx, s, key, p, 1)
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
				switch {
				case err != nil:
					errs.Add(1)
				case r.Fallback:
					fallback.Add(1)
				default:
					ok.Add(1)
				}
			}
		}(w)
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	waitFor(t, "decisions under load", 10*time.Second, func() bool { return ok.Load() >= 500 })
	srv.Stop()
	downAt := ok.Load()
	waitFor(t, "fallbacks while down", 10*time.Second, func() bool { return fallback.Load() >= 500 })
	if got := ok.Load(); got > downAt+16 {
		t.Errorf("%d decisions succeeded with Redis down", got-downAt)
	}
	srv.MustStart()
	upAt := ok.Load()
	waitFor(t, "decisions after restart", 10*time.Second, func() bool { return ok.Load() >= upAt+500 })
	close(stop)
	wg.Wait()

	t.Logf("%d decisions, %d fallbacks, %d errors, slowest %v, %d log records",
		ok.Load(), fallback.Load(), errs.Load(), time.Duration(slowest.Load()), logs.count())
	if errs.Load() != 0 {
		t.Errorf("%d errors", errs.Load())
	}
	if d := time.Duration(slowest.Load()); d > 2*time.Second {
		t.Errorf("slowest decision took %v with a 100ms timeout", d)
	}
	info, err := srv.Info("clients")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(info["connected_clients"]); n > oc.conns+1 { // the client's, and the test's own
		t.Errorf("%d clients connected to Redis after the restart; the store's client keeps %d at most", n, oc.conns)
	}
	settleClients(t, oc, before, baseline, closeS)
}
