package memstore_test

import (
	"context"
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
