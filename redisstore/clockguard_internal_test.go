package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
)

// TestClockGuard steps the clock that a store expects Redis to have (its
// measured offset, moved by hand: Redis's own clock cannot be stepped in a
// test) on a real Redis: under Options.ClockGuard every decision falls
// back, changing nothing, until the step is undone, whichever way it went
// and however many times the offset is measured again; without a guard the
// store follows the step at once.
func TestClockGuard(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	p, err := gcra.NewParams(9, 1, time.Hour) // 10 units, no refill within the test
	if err != nil {
		t.Fatal(err)
	}
	day, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: 24 * time.Hour}.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, guarded := range []bool{true, false} {
		opts := Options{Prefix: "guard" + map[bool]string{true: "on:", false: "off:"}[guarded], Timeout: time.Second}
		if guarded {
			opts.ClockGuard = time.Second
		}
		s := New(srv.Client(), opts)
		if err := s.Check(ctx); err != nil {
			t.Fatal(err)
		}
		take := func(n int64) (funnel.Result, funnel.Result) {
			t.Helper()
			r, err := s.throttle(ctx, "k", p, n, -1)
			if err != nil {
				t.Fatal(err)
			}
			res := make([]funnel.Result, 1)
			if err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: "w", Limit: day, N: n}}, res); err != nil {
				t.Fatal(err)
			}
			return r, res[0]
		}
		if r, w := take(1); r.Fallback || w.Fallback || r.Remaining != 9 || w.Remaining != 9 {
			t.Fatalf("guard %v, before: %+v, %+v", guarded, r, w)
		}
		var leased int64
		for _, step := range []time.Duration{5 * time.Second, -5 * time.Second} {
			// The store now expects Redis's clock step ahead of where it
			// is: as if Redis's clock stepped back by step (or, for a
			// negative step, forward).
			s.clock.offset.Add(step.Microseconds())
			if !guarded {
				// The first call may fall back; the store measures the
				// clock again and follows it.
				eventually.True(t, "decisions after the step, unguarded", func() bool {
					r, w := take(0)
					return !r.Fallback && !w.Fallback
				})
				continue
			}
			steps := s.clock.steps.Load()
			// A lease (of leased quotas) is refused alike, and takes
			// nothing.
			if _, err := s.Lease(ctx, "l", p, LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}}); !errors.Is(err, funnel.ErrUnavailable) {
				t.Fatalf("step %v: lease %v; want unavailable under the guard", step, err)
			}
			for i := 0; i < 3; i++ {
				if r, w := take(1); !r.Fallback || !w.Fallback {
					t.Fatalf("step %v: %+v, %+v; want fallbacks under the guard", step, r, w)
				}
				// A refused call measures the offset again (once a
				// second at most), which the guard does not take.
				eventually.True(t, "a measure not taken", func() bool {
					if r, w := take(1); !r.Fallback || !w.Fallback {
						t.Fatalf("step %v: %+v, %+v; want fallbacks under the guard", step, r, w)
					}
					return s.clock.steps.Load() > steps
				})
				steps = s.clock.steps.Load()
			}
			s.clock.offset.Add(-step.Microseconds()) // the step undone
			if g, err := s.Lease(ctx, "l", p, LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: 1, Min: 1}}); err != nil || g.Units != 1 {
				t.Fatalf("step %v undone: lease %+v, %v; want one unit", step, g, err)
			}
			leased++
			if r, err := s.throttle(ctx, "l", p, 0, -1); err != nil || r.Remaining != 10-leased {
				t.Fatalf("step %v undone: %+v, %v; want %d remaining (a refused lease took nothing)", step, r, err, 10-leased)
			}
			if r, w := take(0); r.Fallback || w.Fallback || r.Remaining != 9 || w.Remaining != 9 {
				t.Fatalf("step %v undone: %+v, %+v; want 9 remaining (a refused call changed nothing)", step, r, w)
			}
		}
	}
}
