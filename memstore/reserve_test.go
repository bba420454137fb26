package memstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

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

// The store keeps its own copy of a reservation's key and id: a caller
// may pass them in a buffer it reuses (a server's read buffer).
func TestReserveCopiesItsKey(t *testing.T) {
	s, _ := newStore(t, memstore.Options{})
	ctx := context.Background()
	c, err := funnel.PerMinute(10).Check()
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte("key-1")
	id := []byte("id-1")
	key, rid := unsafeString(buf), unsafeString(id)
	if _, err := s.Reserve(ctx, key, c, 3, rid, time.Minute); err != nil {
		t.Fatal(err)
	}
	copy(buf, "key-2")
	copy(id, "id-2")
	if st, err := s.Settle(ctx, "key-1", "id-1", 1); err != nil || st.Remaining != 9 {
		t.Fatalf("Settle after the caller's buffers changed: %+v, %v", st, err)
	}
}

// unsafeString is b as a string that aliases it, as a server passes keys
// from its read buffer.
func unsafeString(b []byte) string { return unsafe.String(&b[0], len(b)) }

// Reserves, settles below their estimates and takes, concurrent on one key
// (the takes of a funnel on its lock-free path) at one instant, admit
// exactly what the key holds after them: every estimate is given back to
// its actual, and nothing is admitted past the limit.
func TestConcurrentReservesSettlesTakes(t *testing.T) {
	for _, limit := range []funnel.Limit{
		{Count: 2000, Period: time.Hour, Burst: 1999},
		{Algorithm: funnel.FixedWindow, Count: 2000, Period: time.Hour},
		{Algorithm: funnel.SlidingWindow, Count: 2000, Period: time.Hour},
		{Algorithm: funnel.SlidingLog, Count: 2000, Period: time.Hour},
	} {
		t.Run(limit.Algorithm.String(), func(t *testing.T) {
			s, _ := newStore(t, memstore.Options{})
			ctx := context.Background()
			lim := funnel.New(s)
			var wg sync.WaitGroup
			var mu sync.Mutex
			spent := int64(0)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					mine := int64(0)
					for i := range 200 {
						est := int64(1 + (g+i)%7)
						r, res, err := lim.Reserve(ctx, "k", limit, est, time.Minute)
						if err != nil {
							t.Error(err)
							return
						}
						if res.Allowed {
							actual := int64(i % int(est+1))
							if _, err := lim.Settle(ctx, "k", r.ID, actual); err != nil {
								t.Error(err)
								return
							}
							mine += actual
						}
						if res, err := lim.AllowN(ctx, "k", limit, 1); err != nil {
							t.Error(err)
							return
						} else if res.Allowed {
							mine++
						}
					}
					mu.Lock()
					spent += mine
					mu.Unlock()
				}()
			}
			wg.Wait()
			res, err := lim.Peek(ctx, "k", limit)
			if err != nil || spent > 2000 || res.Remaining != 2000-spent {
				t.Fatalf("%d units spent; the key then: %+v, %v", spent, res, err)
			}
		})
	}
}

// MaxReservations bounds the reservations held: settled ones are dropped
// to make room (a later settle of one answers unknown, changing nothing),
// and a shard full of pending ones refuses a reserve, taking nothing.
func TestMaxReservations(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 1, MaxReservations: 64})
	ctx := context.Background()
	lim := funnel.New(s)
	limit := funnel.PerMinute(1000)
	var first funnel.Reservation
	for i := range 1000 {
		r, _, err := lim.Reserve(ctx, "k", limit, 5, time.Hour)
		if err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		if i == 0 {
			first = r
		}
		if _, err := lim.Settle(ctx, "k", r.ID, 0); err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
		if n := s.Stats().Reservations; n > 64 {
			t.Fatalf("%d reservations held after %d reserves and settles, want at most 64", n, i+1)
		}
	}
	if _, err := lim.Settle(ctx, "k", first.ID, 0); !errors.Is(err, funnel.ErrUnknownReservation) {
		t.Fatalf("a settled reservation dropped for room: %v", err)
	}
	// Pending ones are never dropped.
	held := 0
	var err error
	for err == nil {
		_, _, err = lim.Reserve(ctx, "p", limit, 1, time.Hour)
		held++
	}
	if !errors.Is(err, memstore.ErrReservationsFull) || !errors.Is(err, funnel.ErrUnavailable) {
		t.Fatalf("a reserve in a full shard: %v", err)
	}
	if res, err := lim.Peek(ctx, "p", limit); err != nil || res.Remaining != 1000-int64(held-1) {
		t.Fatalf("after %d reserves, the last refused: %+v, %v", held, res, err)
	}
}
