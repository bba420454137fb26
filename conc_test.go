package funnel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/memstore"
)

// queue is a concurrency limit of 1 at once and 2 more queued, a second
// apart.
var queue = funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute, Burst: 2, UnitDelay: time.Second}

func newConcLimiter(t *testing.T) *funnel.Limiter {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano())
	s := memstore.New(memstore.Options{Now: now.Load})
	t.Cleanup(func() { s.Close() })
	return funnel.New(s)
}

// AcquireWait sleeps the delay of a queued lease, and returns at once when
// there is none.
func TestAcquireWaitSleeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newConcLimiter(t)
		ctx := context.Background()
		for i, want := range []time.Duration{0, time.Second, 2 * time.Second} {
			start := time.Now()
			l, r, err := lim.AcquireWait(ctx, "k", queue)
			if err != nil || !r.Allowed || r.Delay != want || l.ID == "" {
				t.Fatalf("lease %d: %+v, %+v, %v; want a delay of %v", i, l, r, err, want)
			}
			if waited := time.Since(start); waited != want {
				t.Errorf("lease %d: waited %v, want %v", i, waited, want)
			}
		}
		if l, r, err := lim.AcquireWait(ctx, "k", queue); err != nil || r.Allowed || l != (funnel.Lease{}) || r.RetryAfter != time.Minute {
			t.Errorf("beyond the burst: %+v, %+v, %v; want refused", l, r, err)
		}
	})
}

// An AcquireWait whose context ends before its delay gives its lease back.
func TestAcquireWaitCancelledReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newConcLimiter(t)
		ctx := context.Background()
		if _, _, err := lim.AcquireWait(ctx, "k", queue); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		var got funnel.Lease
		go func() {
			var err error
			got, _, err = lim.AcquireWait(wctx, "k", queue)
			done <- err
		}()
		synctest.Wait() // its lease is granted, and it sleeps its delay
		if _, r, err := lim.AcquireID(ctx, "k", queue, "third"); err != nil || r.Delay != 2*time.Second {
			t.Fatalf("while it waits: %+v %v; want the third place", r, err)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || got != (funnel.Lease{}) {
			t.Fatalf("AcquireWait: %+v, %v; want the zero Lease and context.Canceled", got, err)
		}
		// Its place is free again: one more fits.
		if _, r, err := lim.AcquireID(ctx, "k", queue, "fourth"); err != nil || !r.Allowed || r.Delay != 2*time.Second {
			t.Errorf("after the cancelled AcquireWait: %+v %v", r, err)
		}
	})
}

// ReleaseAfter moves the unit delay; bad latencies and leases not held are
// errors that change nothing.
func TestReleaseAfter(t *testing.T) {
	lim := newConcLimiter(t)
	ctx := context.Background()
	a, _, _ := lim.AcquireID(ctx, "k", queue, "a")
	b, r, _ := lim.AcquireID(ctx, "k", queue, "b")
	if r.Delay != time.Second {
		t.Fatalf("b: %+v", r)
	}
	if held, err := lim.ReleaseAfter(ctx, a, 3*time.Second); !held || err != nil {
		t.Fatalf("ReleaseAfter(a) = %v, %v", held, err)
	}
	for _, c := range []struct {
		lease   funnel.Lease
		latency time.Duration
		want    error
	}{
		{a, time.Second, funnel.ErrLeaseNotHeld}, // released already
		{funnel.Lease{Key: "k", ID: "zz"}, time.Second, funnel.ErrLeaseNotHeld},
		{funnel.Lease{}, time.Second, funnel.ErrLeaseNotHeld},
		{b, -1, funnel.ErrInvalidQuantity},
		{b, algo.MaxUnitDelay + 1, funnel.ErrInvalidQuantity},
	} {
		if held, err := lim.ReleaseAfter(ctx, c.lease, c.latency); held || !errors.Is(err, c.want) || funnel.ClassOf(err) != funnel.ClassInvalid {
			t.Errorf("ReleaseAfter(%+v, %v) = %v, %v; want %v", c.lease, c.latency, held, err, c.want)
		}
	}
	// b is still held, and the unit delay is (1s + 3s) / 2: the second
	// lease held waits one unit, the third two.
	if _, r, err := lim.AcquireID(ctx, "k", queue, "c"); err != nil || r.Delay != 2*time.Second {
		t.Errorf("c: %+v, %v; want a delay of 2s", r, err)
	}
	if _, r, err := lim.AcquireID(ctx, "k", queue, "d"); err != nil || r.Delay != 4*time.Second {
		t.Errorf("d: %+v, %v; want a delay of 4s", r, err)
	}
	if held, err := lim.ReleaseAfter(ctx, b, 0); !held || err != nil {
		t.Errorf("ReleaseAfter(b, 0) = %v, %v", held, err)
	}
}

func TestConcurrencyLimitString(t *testing.T) {
	if got, want := queue.String(), "concurrency 1, lease 1m0s, burst 2, unit delay 1s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	for _, l := range []funnel.Limit{
		{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second, Burst: -1},
		{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second, UnitDelay: -1},
		{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second, UnitDelay: algo.MaxUnitDelay + 1},
		{Algorithm: funnel.Concurrency, Count: algo.MaxCount, Period: time.Second, Burst: 1},
		{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Second, UnitDelay: time.Second},
		{Count: 1, Period: time.Second, UnitDelay: time.Second}, // the funnel's commonest path too
	} {
		if err := l.Validate(); !errors.Is(err, funnel.ErrInvalidLimit) {
			t.Errorf("%v: Validate() = %v, want ErrInvalidLimit", l, err)
		}
		if _, err := newConcLimiter(t).Allow(context.Background(), "k", l); !errors.Is(err, funnel.ErrInvalidLimit) {
			t.Errorf("%v: Allow() = %v, want ErrInvalidLimit", l, err)
		}
	}
}

// Random lease ids are 32 hex digits and do not repeat, across batches.
func TestAcquireIDs(t *testing.T) {
	lim := newConcLimiter(t)
	ctx := context.Background()
	many := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1000, Period: time.Minute}
	seen := map[string]bool{}
	for range 300 {
		l, r, err := lim.Acquire(ctx, "ids", many)
		if err != nil || !r.Allowed || len(l.ID) != 32 || strings.Trim(l.ID, "0123456789abcdef") != "" || seen[l.ID] {
			t.Fatalf("lease %+v, %+v, %v (%d ids before)", l, r, err, len(seen))
		}
		seen[l.ID] = true
	}
}
