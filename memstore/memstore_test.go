package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The suite again, with the smallest shard count and a key bound, so that
// eviction paths run under the same cases.
func TestConformanceOneShardBounded(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now, Shards: 1, MaxKeys: 1000, SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func params(t testing.TB, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newStore(t *testing.T, opts memstore.Options) (*memstore.Store, *storetest.Clock) {
	clock := storetest.NewClock(storetest.Epoch)
	opts.Now = clock.Now
	s := memstore.New(opts)
	t.Cleanup(func() { s.Close() })
	return s, clock
}

func TestSweepDropsPassedKeys(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	ctx := context.Background()
	short, long := params(t, 0, 1, time.Second), params(t, 0, 1, time.Hour)
	for i := 0; i < 100; i++ {
		p := short
		if i%4 == 0 {
			p = long
		}
		if _, err := storetest.Throttle(ctx, s, fmt.Sprint("k", i), p, 1); err != nil {
			t.Fatal(err)
		}
	}
	// A peek on a fresh key stores nothing.
	if _, err := storetest.Throttle(ctx, s, "peek", short, 0); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 100 {
		t.Fatalf("keys = %d, want 100", st.Keys)
	}
	clock.Add(time.Second - 1)
	if n := s.Sweep(); n != 0 {
		t.Fatalf("swept %d keys before their TAT", n)
	}
	clock.Add(1)
	if n := s.Sweep(); n != 75 {
		t.Fatalf("swept %d, want 75", n)
	}
	if st := s.Stats(); st.Keys != 25 || st.Expired != 75 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok := s.TAT("k0"); !ok {
		t.Fatal("long key dropped")
	}
	if _, ok := s.TAT("k1"); ok {
		t.Fatal("short key kept")
	}
}

// The background sweep keeps a full bucket for one interval, then drops it.
// The store reads the real clock, which in the bubble moves only when every
// goroutine of the test waits.
func TestBackgroundSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New(memstore.Options{SweepInterval: time.Millisecond})
		defer s.Close()
		if _, err := storetest.Throttle(context.Background(), s, "k", params(t, 0, 1, time.Second), 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the bucket is full again
		synctest.Wait()         // and the sweep of this instant is done
		if st := s.Stats(); st.Keys != 1 || st.Expired != 0 {
			t.Fatalf("at the TAT: %+v, want the key kept one interval more", st)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if st := s.Stats(); st.Keys != 0 || st.Expired != 1 {
			t.Fatalf("one interval after the TAT: %+v, want the key dropped", st)
		}
	})
}

func TestMaxKeysEvictsNearestTAT(t *testing.T) {
	s, clock := newStore(t, memstore.Options{Shards: 1, MaxKeys: 8, SweepInterval: -1})
	ctx := context.Background()
	p := params(t, 9, 1, time.Second) // tolerance 10 s
	// key i spends i+1 units: its TAT is now + (i+1) s.
	for i := 0; i < 8; i++ {
		if r, err := storetest.Throttle(ctx, s, fmt.Sprint("k", i), p, int64(i+1)); err != nil || !r.Allowed {
			t.Fatal(r, err)
		}
	}
	if _, err := storetest.Throttle(ctx, s, "new", p, 1); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Keys != 8 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The sample covers the whole shard here, so the victim is exact: k0.
	if _, ok := s.TAT("k0"); ok {
		t.Fatal("k0 (nearest TAT) not evicted")
	}
	// Once some TATs have passed, those keys go first and nothing live is evicted.
	clock.Add(3 * time.Second) // k1, k2 and "new" are now full buckets
	for i := 0; i < 2; i++ {
		if _, err := storetest.Throttle(ctx, s, fmt.Sprint("n", i), p, 1); err != nil {
			t.Fatal(err)
		}
	}
	st = s.Stats()
	if st.Evicted != 1 || st.Keys > 8 {
		t.Fatalf("live key evicted while passed ones remained: %+v", st)
	}
	for i := 3; i < 8; i++ {
		if _, ok := s.TAT(fmt.Sprint("k", i)); !ok {
			t.Fatalf("k%d lost", i)
		}
	}
}

func TestMaxKeysBoundHolds(t *testing.T) {
	for _, max := range []int{1, 3, 100, 1000} {
		s, _ := newStore(t, memstore.Options{MaxKeys: max, SweepInterval: -1})
		p := params(t, 0, 1, time.Hour)
		for i := 0; i < 5*max+100; i++ {
			if r, err := storetest.Throttle(context.Background(), s, fmt.Sprint("k", i), p, 1); err != nil || !r.Allowed {
				t.Fatal(r, err)
			}
		}
		if st := s.Stats(); st.Keys > max || st.Keys == 0 {
			t.Fatalf("MaxKeys %d: holding %d keys", max, st.Keys)
		}
	}
}

// After a burst of keys has passed, Sweep rebuilds the shards so memory is
// given back (Go maps never shrink by themselves).
func TestMemoryFollowsActiveKeys(t *testing.T) {
	s, clock := newStore(t, memstore.Options{Shards: 4, SweepInterval: -1})
	ctx := context.Background()
	p := params(t, 0, 1, time.Second)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := 0; i < 200000; i++ {
		if _, err := storetest.Throttle(ctx, s, fmt.Sprintf("user:%07d", i), p, 1); err != nil {
			t.Fatal(err)
		}
	}
	full := heap()
	clock.Add(time.Second)
	if n := s.Sweep(); n != 200000 {
		t.Fatalf("swept %d", n)
	}
	after := heap()
	if grown := int64(full) - int64(before); grown < 200000*16 {
		t.Fatalf("heap grew by only %d bytes for 200000 keys: measurement broken", grown)
	}
	if left := int64(after) - int64(before); left > int64(full-before)/10 {
		t.Fatalf("after sweeping every key, %d of %d bytes still held", left, full-before)
	}
	runtime.KeepAlive(s)
}

func TestZeroAllocsOnExistingKey(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	p := params(t, 1<<20, 1e6, time.Second)
	key := "user:12345"
	if _, err := storetest.Throttle(ctx, s, key, p, 1); err != nil {
		t.Fatal(err)
	}
	ops := []funnel.Op{{Kind: funnel.OpTake, Key: key, N: 1, Limit: funnel.Checked{GCRA: p}}}
	res := make([]funnel.Result, 1)
	if n := testing.AllocsPerRun(1000, func() { s.Do(ctx, ops, res) }); n != 0 {
		t.Fatalf("%v allocs per decision on an existing key", n)
	}
	lim := funnel.New(s)
	limit := funnel.PerSecond(1e6).WithBurst(1 << 20)
	if n := testing.AllocsPerRun(1000, func() { lim.Allow(ctx, key, limit) }); n != 0 {
		t.Fatalf("%v allocs per Limiter.Allow on an existing key", n)
	}
}

// The key passed in may alias a reused buffer; the store must keep a copy.
func TestKeyIsCopied(t *testing.T) {
	s, _ := newStore(t, memstore.Options{SweepInterval: -1})
	buf := []byte("alpha")
	p := params(t, 0, 1, time.Hour)
	if _, err := storetest.Throttle(context.Background(), s, string(buf), p, 1); err != nil {
		t.Fatal(err)
	}
	copy(buf, "bravo")
	if _, ok := s.TAT("alpha"); !ok {
		t.Fatal("stored key changed with the caller's buffer")
	}
}

// Many goroutines on many keys with a real clock: no race, no error, and no
// key admits more than its bound.
func TestConcurrentManyKeys(t *testing.T) {
	s := memstore.New(memstore.Options{Shards: 4, MaxKeys: 500, SweepInterval: time.Millisecond})
	defer s.Close()
	p := params(t, 9, 10, time.Hour)
	var admitted [64]atomic.Int64
	start := time.Now()
	done := make(chan struct{})
	for w := 0; w < 8; w++ {
		go func(seed uint64) {
			defer func() { done <- struct{}{} }()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < 20000; i++ {
				k := r.IntN(64)
				res, err := storetest.Throttle(context.Background(), s, fmt.Sprint("k", k), p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					admitted[k].Add(1)
				}
			}
		}(uint64(w))
	}
	for w := 0; w < 8; w++ {
		<-done
	}
	bound := p.Limit + int64(time.Since(start))/p.Interval + 1
	for k := range admitted {
		if got := admitted[k].Load(); got > bound {
			t.Errorf("key %d admitted %d > %d", k, got, bound)
		}
	}
}

func BenchmarkThrottleOneKey(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	p := params(b, 1<<20, 1e6, time.Second)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ops := []funnel.Op{{Kind: funnel.OpTake, Key: "user:12345", N: 1, Limit: funnel.Checked{GCRA: p}}}
		res := make([]funnel.Result, 1)
		for pb.Next() {
			s.Do(ctx, ops, res)
		}
	})
}

func BenchmarkThrottleManyKeys(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	// One per minute with a deep burst: every key keeps its state (and is
	// allowed) for the whole run, however slow the machine.
	p := params(b, 1<<26, 1, time.Minute)
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%07d", i)
		storetest.Throttle(ctx, s, keys[i], p, 1)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(seed.Add(1), 7))
		ops := []funnel.Op{{Kind: funnel.OpTake, N: 1, Limit: funnel.Checked{GCRA: p}}}
		res := make([]funnel.Result, 1)
		for pb.Next() {
			ops[0].Key = keys[r.IntN(len(keys))]
			s.Do(ctx, ops, res)
		}
	})
}

// A hot key stays exact while its shard is rebuilt, swept and evicted from
// under the lock-free readers: other keys come and go in the same (single)
// shard, with expiries, resets and table growth and shrinkage, all at once.
func TestExactWhileTableChanges(t *testing.T) {
	s, clock := newStore(t, memstore.Options{Shards: 1, SweepInterval: -1})
	ctx := context.Background()
	hot := params(t, 4, 10, time.Second) // T = 100 ms, limit 5
	churn := params(t, 0, 1, time.Millisecond)
	const steps, stepLen = 30, 250 * time.Millisecond
	var admitted atomic.Int64
	stop := make(chan struct{})
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			k := fmt.Sprint("churn", i%3000)
			storetest.Throttle(ctx, s, k, churn, 1)
			switch i % 97 {
			case 0:
				s.Sweep()
			case 1:
				s.Reset(ctx, fmt.Sprint("churn", (i+7)%3000))
			}
		}
	}()
	for i := 0; i < steps; i++ {
		clock.Set(storetest.Epoch + int64(i)*int64(stepLen))
		done := make(chan struct{})
		for w := 0; w < 4; w++ {
			go func() {
				defer func() { done <- struct{}{} }()
				for j := 0; j < 200; j++ {
					if r, err := storetest.Throttle(ctx, s, "hot", hot, 1); err != nil {
						t.Error(err)
						return
					} else if r.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		for w := 0; w < 4; w++ {
			<-done
		}
	}
	close(stop)
	<-churnDone
	want := hot.Limit + int64(steps-1)*int64(stepLen)/hot.Interval
	if got := admitted.Load(); got != want {
		t.Fatalf("admitted %d, want exactly %d", got, want)
	}
}

// With a bound on keys, eviction and charges race; the bound holds.
func TestEvictionUnderContention(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 2, MaxKeys: 64, SweepInterval: -1})
	p := params(t, 10, 1, time.Hour)
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func(w int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 3000; i++ {
				storetest.Throttle(context.Background(), s, fmt.Sprint("k", (i*7+w)%500), p, 1)
			}
		}(w)
	}
	for w := 0; w < 4; w++ {
		<-done
	}
	if st := s.Stats(); st.Keys > 64 || st.Evicted == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func BenchmarkLimiterAllowOneKey(b *testing.B) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	lim := funnel.New(s)
	limit := funnel.PerSecond(1e6).WithBurst(1 << 30)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lim.Allow(ctx, "user:12345", limit)
		}
	})
}

// BenchmarkThrottleNewKeys is a decision for a key the store does not hold,
// which inserts it: unbounded, under a bound with room (the key is reset
// after each decision, so the store never fills), and under a full bound
// (every new key evicts one).
func BenchmarkThrottleNewKeys(b *testing.B) {
	p := params(b, 1<<20, 1, time.Minute) // every key keeps its state for the run
	keys := make([]string, 1<<18)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%07d", i)
	}
	for _, c := range []struct {
		name  string
		max   int
		reset bool
	}{
		{"unbounded_reset", 0, true},
		{"room_reset", 1 << 20, true},
		{"full_evict", 1 << 12, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{MaxKeys: c.max, SweepInterval: -1})
			defer s.Close()
			ctx := context.Background()
			if !c.reset {
				for _, k := range keys[:c.max] {
					storetest.Throttle(ctx, s, k, p, 1)
				}
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ops := []funnel.Op{{Kind: funnel.OpTake, N: 1, Limit: funnel.Checked{GCRA: p}}}
				res := make([]funnel.Result, 1)
				for pb.Next() {
					k := keys[next.Add(1)%uint64(len(keys))]
					ops[0].Key = k
					s.Do(ctx, ops, res)
					if c.reset {
						s.Reset(ctx, k)
					}
				}
			})
		})
	}
}
