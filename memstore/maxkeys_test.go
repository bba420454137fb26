package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

// The store holds exactly MaxKeys keys, whatever the number of shards: it
// evicts nothing while it holds fewer, and once full, each new key evicts
// exactly one. Every key here is still limited (its TAT an hour ahead), so
// each eviction is a key that would be admitted again too soon.
func TestMaxKeysExact(t *testing.T) {
	ctx := context.Background()
	p := params(t, 0, 1, time.Hour)
	window := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Hour})
	for _, max := range []int{1, 7, 10, 1000} {
		for _, shards := range []int{1, 64} {
			t.Run(fmt.Sprintf("max%d_shards%d", max, shards), func(t *testing.T) {
				s, _ := newStore(t, memstore.Options{Shards: shards, MaxKeys: max, SweepInterval: -1})
				// One key in three is a fixed window: MaxKeys counts keys of
				// every algorithm.
				take := func(i int) {
					t.Helper()
					key := fmt.Sprint("k", i)
					if i%3 == 2 {
						if r := do(t, s, takeOp(key, window, 1)); !r[0].Allowed {
							t.Fatalf("%s refused", key)
						}
						return
					}
					if r, err := storetest.Throttle(ctx, s, key, p, 1); err != nil || !r.Allowed {
						t.Fatalf("%s: %+v, %v", key, r, err)
					}
				}
				for i := range max {
					take(i)
					if st := s.Stats(); st.Keys != i+1 || st.Evicted != 0 {
						t.Fatalf("after %d keys: %+v (a limited key evicted below the bound)", i+1, st)
					}
				}
				for i := range max {
					if _, ok, _ := s.TTL(ctx, fmt.Sprint("k", i)); !ok {
						t.Fatalf("k%d lost before the store was full", i)
					}
				}
				for i := max; i < 3*max+10; i++ {
					take(i)
					if st := s.Stats(); st.Keys != max || st.Evicted != uint64(i+1-max) {
						t.Fatalf("after %d keys: %+v, want %d keys and %d evicted", i+1, st, max, i+1-max)
					}
				}
				// A key given back makes room: the next new key evicts nothing.
				held := ""
				for i := range 3*max + 10 {
					if _, ok, _ := s.TTL(ctx, fmt.Sprint("k", i)); ok {
						held = fmt.Sprint("k", i)
						break
					}
				}
				if ok, _ := s.Reset(ctx, held); !ok {
					t.Fatalf("reset %s: not held", held)
				}
				before := s.Stats().Evicted
				take(3*max + 10)
				if st := s.Stats(); st.Keys != max || st.Evicted != before {
					t.Fatalf("after a reset and a new key: %+v", st)
				}
			})
		}
	}
}

// A concurrency limit that holds leases is never evicted: forgetting it
// would free its leases and admit more at once than its count. A full
// store evicts the other keys first, then refuses a new key (ErrFull,
// which wraps funnel.ErrUnavailable) and changes nothing; once the
// leases end, the keys are empty and make room again.
func TestMaxKeysKeepsLeases(t *testing.T) {
	ctx := context.Background()
	one := check(t, funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute})
	acquire := func(s *memstore.Store, key, lease string) (funnel.Result, error) {
		res := make([]funnel.Result, 1)
		err := s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: key, Limit: one, N: 1, Lease: lease}}, res)
		return res[0], err
	}
	hour := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour})
	p := params(t, 0, 1, time.Hour)
	for _, shards := range []int{1, 4} {
		t.Run(fmt.Sprint("shards", shards), func(t *testing.T) {
			s, clock := newStore(t, memstore.Options{Shards: shards, MaxKeys: 4, SweepInterval: -1})
			// Three leases, and a window that empties before any of them.
			for i := range 3 {
				if r, err := acquire(s, fmt.Sprint("c", i), "a"); err != nil || !r.Allowed {
					t.Fatalf("c%d: %+v %v", i, r, err)
				}
			}
			do(t, s, takeOp("w", check(t, fixedLimit), 1))
			// A new key evicts the window, though it ends first...
			do(t, s, takeOp("h", hour, 1))
			if _, ok, _ := s.TTL(ctx, "w"); ok {
				t.Fatal("the window was kept")
			}
			// ...and then the new window, not a lease.
			if r, err := storetest.Throttle(ctx, s, "g", p, 1); err != nil || !r.Allowed {
				t.Fatalf("g: %+v %v", r, err)
			}
			if st := s.Stats(); st.Keys != 4 || st.Evicted != 2 {
				t.Fatalf("stats %+v", st)
			}
			// A fourth lease evicts the funnel key.
			if r, err := acquire(s, "c3", "a"); err != nil || !r.Allowed {
				t.Fatalf("c3: %+v %v", r, err)
			}
			// Four leases: a new key, of any kind, is refused.
			if _, err := acquire(s, "c4", "a"); !errors.Is(err, memstore.ErrFull) || !errors.Is(err, funnel.ErrUnavailable) {
				t.Fatalf("c4: %v, want ErrFull", err)
			}
			if _, err := storetest.Throttle(ctx, s, "g2", p, 1); !errors.Is(err, memstore.ErrFull) {
				t.Fatalf("g2: %v, want ErrFull", err)
			}
			if res := make([]funnel.Result, 2); !errors.Is(s.Do(ctx, []funnel.Op{takeOp("x", hour, 1), takeOp("y", hour, 1)}, res), memstore.ErrFull) {
				t.Fatal("a call of two new keys was not refused")
			}
			// Every lease is still held: a second one on each is refused.
			for i := range 4 {
				if r, err := acquire(s, fmt.Sprint("c", i), "b"); err != nil || r.Allowed {
					t.Fatalf("c%d: a second lease: %+v %v (the first was lost)", i, r, err)
				}
			}
			if st := s.Stats(); st.Keys != 4 || st.Evicted != 3 {
				t.Fatalf("stats %+v", st)
			}
			// Once the leases have ended, their keys make room.
			clock.Add(2 * time.Minute)
			if r, err := acquire(s, "c4", "a"); err != nil || !r.Allowed {
				t.Fatalf("c4 after the leases ended: %+v %v", r, err)
			}
		})
	}
}
