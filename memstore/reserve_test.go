package memstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// Pending state is bounded: the sweep drops every reservation whose TTL
// has ended, settled or not, and no other.
func TestSweepDropsReservations(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	ctx := context.Background()
	lim := funnel.New(s)
	limit := funnel.PerSecond(1000)
	for i := range 100 {
		ttl := time.Second
		if i%2 == 0 {
			ttl = time.Minute
		}
		r, _, err := lim.Reserve(ctx, "k", limit, 1, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := lim.Settle(ctx, "k", r.ID, 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := s.Stats().Reservations; n != 100 {
		t.Fatalf("%d reservations held, want 100", n)
	}
	clock.Add(time.Second)
	s.Sweep()
	if n := s.Stats().Reservations; n != 50 {
		t.Fatalf("%d reservations held a second later, want 50", n)
	}
	clock.Add(time.Minute)
	s.Sweep()
	if n := s.Stats().Reservations; n != 0 {
		t.Fatalf("%d reservations held a minute later, want 0", n)
	}
}

// Concurrent settles of one reservation settle it once: one gives back,
// every other says Again, and the key holds exactly the actual.
func TestConcurrentSettles(t *testing.T) {
	s, _ := newStore(t, memstore.Options{})
	ctx := context.Background()
	lim := funnel.New(s)
	limit := funnel.PerMinute(100)
	r, _, err := lim.Reserve(ctx, "k", limit, 60, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	first := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := lim.Settle(ctx, "k", r.ID, 10)
			if err != nil {
				t.Error(err)
				return
			}
			if !st.Again {
				mu.Lock()
				first++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != 1 {
		t.Fatalf("%d settles applied, want 1", first)
	}
	if res, err := lim.Peek(ctx, "k", limit); err != nil || res.Remaining != 90 {
		t.Fatalf("after the settles: %+v, %v; want 90 remaining", res, err)
	}
}
