package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// heldNow returns the number of keys held and the count of places, read
// under every shard's lock at once (taken in address order, as Do takes
// them). Keys are added and dropped, and places taken and given back, only
// under a shard's lock, so the two must be equal.
func (s *Store) heldNow() (held int, count int64) {
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	for i := range s.shards {
		held += s.shards[i].held()
	}
	count = s.keys.Load()
	for i := range s.shards {
		sh := &s.shards[i]
		conc := 0
		for _, fs := range sh.fam {
			if fs.kind == kindConc {
				conc++
			}
		}
		if conc != sh.conc {
			// The count of concurrency limits is off: say so as a bound
			// broken.
			held = -1 << 20
		}
	}
	for i := range s.shards {
		s.shards[i].mu.Unlock()
	}
	return held, count
}

// Throttle, Do of one and of several keys (several new keys at once, more
// than the bound for the smallest), Reset and Sweep race on a bounded
// store while the clock moves, so that keys are added, emptied, dropped and
// evicted in every shard. A monitor that stops every shard at once never
// sees more than MaxKeys keys, nor a count of places other than the keys
// held.
func TestBoundUnderContention(t *testing.T) {
	for _, max := range []int{1, 7, 64} {
		for _, shards := range []int{1, 64} {
			t.Run(fmt.Sprintf("max%d_shards%d", max, shards), func(t *testing.T) {
				testBoundUnderContention(t, max, shards)
			})
		}
	}
}

func testBoundUnderContention(t *testing.T, max, shards int) {
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	s := New(Options{Now: clock.Load, Shards: shards, MaxKeys: max, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	short, err := gcra.NewParams(0, 1, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	long, err := gcra.NewParams(3, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: 10 * time.Millisecond}.Check()
	if err != nil {
		t.Fatal(err)
	}
	gl, err := funnel.Limit{Count: 1, Period: time.Hour, Burst: 3}.Check()
	if err != nil {
		t.Fatal(err)
	}
	conc, err := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: 5 * time.Millisecond}.Check()
	if err != nil {
		t.Fatal(err)
	}
	keys := 4*max + 8
	stop := make(chan struct{})
	var monitor sync.WaitGroup
	monitor.Add(1)
	go func() {
		defer monitor.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			held, count := s.heldNow()
			if held > max || held < 0 || count != int64(held) {
				t.Errorf("%d keys held, count %d, bound %d", held, count, max)
				return
			}
		}
	}()
	var writers sync.WaitGroup
	for w := range 4 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			res := make([]funnel.Result, 3)
			for range 1500 {
				g, f := fmt.Sprint("g", r.IntN(keys)), fmt.Sprint("f", r.IntN(keys))
				var err error
				switch r.IntN(9) {
				case 0, 1:
					p := long
					if r.IntN(2) == 0 {
						p = short
					}
					_, err = s.TakeFunnel(ctx, g, p, 1)
				case 2, 3:
					err = s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: f, Limit: fixed, N: 1}}, res)
				case 4, 5:
					g2 := fmt.Sprint("g", keys+r.IntN(keys)) // never g: the keys differ
					err = s.Do(ctx, []funnel.Op{
						{Kind: funnel.OpTake, Key: g, Limit: gl, N: 1},
						{Kind: funnel.OpTake, Key: f, Limit: fixed, N: 1},
						{Kind: funnel.OpTake, Key: g2, Limit: gl, N: 1},
					}, res)
				case 6:
					_, err = s.Reset(ctx, g)
				case 7:
					// A lease (never evicted: a store full of them refuses
					// new keys), or, on a key of the fixed windows emptied,
					// a state of another kind in the same place.
					c := fmt.Sprint("c", r.IntN(keys))
					if r.IntN(4) == 0 {
						c = f
					}
					err = s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: c, Limit: conc, N: 1, Lease: fmt.Sprint(r.IntN(3))}}, res[:1])
				default:
					if r.IntN(8) == 0 {
						s.Sweep()
					}
					clock.Add(int64(time.Millisecond))
				}
				if errors.Is(err, ErrFull) || errors.Is(err, funnel.ErrWrongType) {
					err = nil // a store full of leases; a window's key holding a lease
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	writers.Wait()
	close(stop)
	monitor.Wait()
	if held, count := s.heldNow(); count != int64(held) || held > max || held < 0 {
		t.Fatalf("at rest: %d keys held, count %d, bound %d", held, count, max)
	}
	if st := s.Stats(); st.Evicted == 0 {
		t.Fatalf("nothing evicted: the bound was never reached (%+v)", st)
	}
}

// A call that adds keys to a full store, whose shards hold too few keys to
// evict and the others' locks are taken, lets its locks go, evicts
// elsewhere and tries again: it is applied once, whole, and the bound
// holds. Shard 0 holds two keys, "a", and the test holds its lock; the
// calls add keys of shard 1, which holds the store's third key, "c", when
// the call also charges c.
func TestNoRoomRetries(t *testing.T) {
	hook := make(chan struct{}, 1)
	testHookEvictAnywhere = func() {
		select {
		case hook <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { testHookEvictAnywhere = nil })
	ctx := context.Background()
	p, err := gcra.NewParams(3, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := funnel.Limit{Count: 1, Period: time.Hour, Burst: 3}.Check()
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Hour}.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		withC bool
		call  func(s *Store, b []string) error
	}{
		{"throttle", false, func(s *Store, b []string) error {
			_, err := s.TakeFunnel(ctx, b[0], p, 1)
			return err
		}},
		{"do_one", false, func(s *Store, b []string) error {
			return s.Do(ctx, []funnel.Op{{Kind: funnel.OpTake, Key: b[0], Limit: fixed, N: 1}}, make([]funnel.Result, 1))
		}},
		{"do_many", true, func(s *Store, b []string) error {
			return s.Do(ctx, []funnel.Op{
				{Kind: funnel.OpTake, Key: b[0], Limit: gl, N: 1},
				{Kind: funnel.OpTake, Key: "c", Limit: gl, N: 1},
				{Kind: funnel.OpTake, Key: b[1], Limit: fixed, N: 1},
			}, make([]funnel.Result, 3))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
			max := 2
			if c.withC {
				max = 3
			}
			s := New(Options{Now: func() int64 { return now }, Shards: 2, MaxKeys: max, SweepInterval: -1})
			defer s.Close()
			_, cs := s.hash("c")
			sh0 := &s.shards[0]
			if cs == sh0 {
				sh0 = &s.shards[1]
			}
			var a, b []string
			for i := 0; len(a) < 2 || len(b) < 2; i++ {
				k := fmt.Sprint("k", i)
				if _, sh := s.hash(k); sh == sh0 {
					a = append(a, k)
				} else {
					b = append(b, k)
				}
			}
			for _, k := range a[:2] {
				if _, err := s.TakeFunnel(ctx, k, p, 1); err != nil {
					t.Fatal(err)
				}
			}
			if c.withC {
				if _, err := s.TakeFunnel(ctx, "c", p, 2); err != nil {
					t.Fatal(err)
				}
			}
			sh0.mu.Lock()
			done := make(chan error, 1)
			go func() { done <- c.call(s, b) }()
			<-hook // the call found no room without waiting, and let its locks go
			sh0.mu.Unlock()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			held, count := s.heldNow()
			if held != max || count != int64(max) {
				t.Fatalf("%d keys held, count %d, want %d", held, count, max)
			}
			adds := 1
			if c.withC {
				adds = 2
			}
			for _, k := range b[:adds] {
				if _, ok, _ := s.TTL(ctx, k); !ok {
					t.Fatalf("%s not added", k)
				}
			}
			if !c.withC {
				if st := s.Stats(); st.Evicted != 1 {
					t.Fatalf("%d evicted, want 1", st.Evicted)
				}
				return
			}
			// c was charged 2 units before the call: kept, the call charged
			// it once more; evicted while the call made room, it was added
			// again with the call's one unit. Anything else is a charge lost
			// or applied twice by the call that was tried again.
			switch tat, _ := s.TAT("c"); tat {
			case now + 3*int64(time.Hour), now + int64(time.Hour):
			default:
				t.Fatalf("c's TAT is now + %v, want 3h (kept) or 1h (evicted and added again)", time.Duration(tat-now))
			}
		})
	}
}
