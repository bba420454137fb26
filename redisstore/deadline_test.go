package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/storetest"
)

// A decision that fell back because Redis was frozen (SIGSTOP) was not
// made: its script, which waited in Redis's socket buffer, runs when Redis
// resumes, after its deadline, and changes nothing. Funnels (one at a time
// and batched), another algorithm of the family and a reset are each sent
// while Redis is frozen; once it resumes, every key is as it was. Funnels
// are decided by the script, and by Funnel's module where Redis has loaded
// it.
func TestNotDecidedWhenLate(t *testing.T) { runOutagePaths(t, testNotDecidedWhenLate) }

func testNotDecidedWhenLate(t *testing.T, oc outageClient, path redisstore.FunnelPath) {
	srv := path.Start(t)
	ctx := context.Background()
	slow := mkParams(t, 9, 1, time.Hour) // limit 10, no refill within the test
	day, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: 24 * time.Hour}.Check()
	if err != nil {
		t.Fatal(err)
	}
	s, closeS := oc.open(t, srv.Addr, redisstore.Options{Timeout: 50 * time.Millisecond})
	defer closeS()
	// Check measures the offset of Redis's clock, which deadlines need.
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	window := func(n int64) (funnel.Result, error) {
		res := make([]funnel.Result, 1)
		err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: "w", Limit: day, N: n}}, res)
		return res[0], err
	}
	// With Redis up, a call that a loaded machine delays past the 50 ms
	// timeout answers a fallback, which decided nothing: ask again.
	decided := func(f func() (funnel.Result, error)) (funnel.Result, error) {
		for range 100 {
			if r, err := f(); err != nil || !r.Fallback {
				return r, err
			}
		}
		t.Fatal("100 fallbacks in a row with Redis up")
		return funnel.Result{}, nil
	}
	peek := func() (funnel.Result, error) { return storetest.Throttle(ctx, s, "k", slow, 0) }
	if r, err := decided(func() (funnel.Result, error) { return storetest.Throttle(ctx, s, "k", slow, 1) }); err != nil || r.Remaining != 9 {
		t.Fatalf("before: %+v, %v", r, err)
	}
	if r, err := decided(func() (funnel.Result, error) { return window(1) }); err != nil || r.Remaining != 9 {
		t.Fatalf("before: %+v, %v", r, err)
	}

	srv.Pause()
	var wg sync.WaitGroup
	for w := range 8 { // several at once, so that some go in batches
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				if r, err := storetest.Throttle(ctx, s, "k", slow, 1); err != nil || !r.Fallback {
					t.Errorf("Redis frozen: %+v, %v", r, err)
				}
			}
			if w == 0 {
				if r, err := window(1); err != nil || !r.Fallback {
					t.Errorf("Redis frozen, window: %+v, %v", r, err)
				}
				if _, err := funnel.New(s).Reset(ctx, "w"); !errors.Is(err, funnel.ErrUnavailable) {
					t.Errorf("Redis frozen, reset: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	srv.Resume()

	// Wait until a late script has run: refused for its deadline, or
	// (without deadlines) charging the key.
	waitFor(t, "a late script", 10*time.Second, func() bool {
		if info, err := srv.Info("errorstats"); err == nil && info["errorstat_DEADLINE"] != "" {
			return true
		}
		r, err := storetest.Throttle(ctx, s, "k", slow, 0)
		return err == nil && !r.Fallback && r.Remaining != 9
	})
	// Redis runs a connection's commands in order: a peek sent after the
	// late scripts on each connection answers after them.
	for range 16 {
		if r, err := decided(peek); err != nil || r.Remaining != 9 {
			t.Fatalf("after: funnel %+v, %v; want 9 remaining (a decision answered as a fallback was made)", r, err)
		}
		if r, err := decided(func() (funnel.Result, error) { return window(0) }); err != nil || r.Remaining != 9 {
			t.Fatalf("after: window %+v, %v; want 9 remaining (a decision or a reset answered as failed was made)", r, err)
		}
	}
	info, err := srv.Info("errorstats")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scripts that Redis ran after their deadline, refused: %s", info["errorstat_DEADLINE"])
}

// TestShortCallerDeadline checks that a caller's deadline nearer than a
// quarter of the store's timeout still leaves the call a deadline ahead
// of it (a quarter of what is left), rather than one in the past, which
// made every such call late: a 1 s context on a store with a 10 s timeout
// fell back (a refund of Envoy's rate-limit service, bounded at 2 s, on
// a store with a long timeout, was never made).
func TestShortCallerDeadline(t *testing.T) {
	srv := redistest.StartServer(t)
	s := redisstore.New(srv.Client(), redisstore.Options{Timeout: 10 * time.Second})
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	p := mkParams(t, 9, 1, time.Hour)
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		r, err := storetest.Throttle(ctx, s, "k", p, 1)
		cancel()
		if err != nil || r.Fallback || r.Remaining != int64(9-i) {
			t.Fatalf("decision %d under a 1 s deadline: %+v, %v", i+1, r, err)
		}
	}
}
