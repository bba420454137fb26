package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

func check(t testing.TB, l funnel.Limit) funnel.Checked {
	t.Helper()
	c, err := l.Check()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// do runs one Do call and fails on an error.
func do(t testing.TB, s *memstore.Store, ops ...funnel.Op) []funnel.Result {
	t.Helper()
	res := make([]funnel.Result, len(ops))
	if err := s.Do(context.Background(), ops, res); err != nil {
		t.Fatal(err)
	}
	return res
}

func takeOp(key string, c funnel.Checked, n int64) funnel.Op {
	return funnel.Op{Kind: funnel.OpTake, Key: key, Limit: c, N: n}
}

var (
	fixedLimit = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second}
	logLimit   = funnel.Limit{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second}
	leases     = funnel.Limit{Algorithm: funnel.Concurrency, Count: 10, Period: time.Minute}
)

// The sweep drops family keys once their state is empty, and bans once they
// have ended; Stats counts both.
func TestSweepFamily(t *testing.T) {
	s, clock := newStore(t, memstore.Options{SweepInterval: -1})
	fixed, log, conc := check(t, fixedLimit), check(t, logLimit), check(t, leases)
	banning := fixedLimit
	banning.Ban = 5 * time.Second
	ban := check(t, banning)
	for i := range 30 {
		do(t, s, takeOp(fmt.Sprint("f", i), fixed, 1))
		do(t, s, takeOp(fmt.Sprint("l", i), log, 1))
		do(t, s, funnel.Op{Kind: funnel.OpTake, Key: fmt.Sprint("c", i), Limit: conc, N: 1, Lease: "x"})
	}
	do(t, s, takeOp("b", ban, 11)) // above the count: banned, no state
	if st := s.Stats(); st.Keys != 90 || st.Bans != 1 {
		t.Fatalf("stats %+v, want 90 keys and 1 ban", st)
	}
	// storetest.Epoch is 971.038011 ms into its second: the fixed windows
	// end at the second, the logs (whose units count from the next
	// millisecond) at 1.972 s, the ban 5 s after Epoch, the leases at
	// 60.971 s.
	sec := storetest.Epoch - storetest.Epoch%1e9
	sweepAt := func(at int64, want int) {
		t.Helper()
		clock.Set(at)
		if n := s.Sweep(); n != want {
			t.Fatalf("swept %d keys at %d ns after the second, want %d", n, at-sec, want)
		}
	}
	sweepAt(sec+1e9-1, 0)
	sweepAt(sec+1e9, 30)
	sweepAt(sec+1972e6-1, 0)
	sweepAt(sec+1972e6, 30)
	if st := s.Stats(); st.Keys != 30 || st.Bans != 1 || st.Expired != 60 {
		t.Fatalf("stats %+v", st)
	}
	sweepAt(storetest.Epoch+int64(5*time.Second)-1, 0)
	if st := s.Stats(); st.Bans != 1 {
		t.Fatalf("ban dropped before its end: %+v", st)
	}
	sweepAt(storetest.Epoch+int64(5*time.Second), 0)
	if st := s.Stats(); st.Bans != 0 {
		t.Fatalf("ended ban kept: %+v", st)
	}
	sweepAt(sec+60971e6-1, 0)
	sweepAt(sec+60971e6, 30)
	if st := s.Stats(); st.Keys != 0 || st.Bytes > 64*1024 {
		t.Fatalf("stats after everything emptied: %+v", st)
	}
}

// MaxKeys counts keys of every algorithm; a full shard evicts the key whose
// state empties first, whatever its algorithm.
func TestMaxKeysCountsFamily(t *testing.T) {
	s, clock := newStore(t, memstore.Options{Shards: 1, MaxKeys: 8, SweepInterval: -1})
	ctx := context.Background()
	hour := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Hour})
	// Four funnel keys, their TATs 2 s to 5 s ahead...
	p := params(t, 9, 1, time.Second)
	for i := range 4 {
		if _, err := storetest.Throttle(ctx, s, fmt.Sprint("g", i), p, int64(i+2)); err != nil {
			t.Fatal(err)
		}
	}
	// ...four hourly windows, and one window that ends first: the victim.
	for i := range 3 {
		do(t, s, takeOp(fmt.Sprint("h", i), hour, 1))
	}
	do(t, s, takeOp("short", check(t, fixedLimit), 1))
	if st := s.Stats(); st.Keys != 8 || st.Evicted != 0 {
		t.Fatalf("stats %+v", st)
	}
	do(t, s, takeOp("new", hour, 1))
	if st := s.Stats(); st.Keys != 8 || st.Evicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	if _, ok, _ := s.TTL(ctx, "short"); ok {
		t.Fatal("the window that ends first was not evicted")
	}
	// A funnel key arriving next evicts the nearest TAT: g0.
	if _, err := storetest.Throttle(ctx, s, "g-new", p, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.TAT("g0"); ok {
		t.Fatal("g0 (nearest TAT) not evicted")
	}
	// Empty states go first, and nothing live is evicted.
	clock.Add(3 * time.Second) // g1 and g-new are full buckets again
	do(t, s, takeOp("n0", hour, 1))
	do(t, s, takeOp("n1", hour, 1))
	if st := s.Stats(); st.Keys != 8 || st.Evicted != 2 {
		t.Fatalf("a live key was evicted while empty ones remained: %+v", st)
	}
}

// The bound holds whatever mix of algorithms arrives.
func TestMaxKeysBoundFamily(t *testing.T) {
	s, _ := newStore(t, memstore.Options{MaxKeys: 100, SweepInterval: -1})
	fixed, log := check(t, fixedLimit), check(t, logLimit)
	p := params(t, 0, 1, time.Hour)
	for i := range 1000 {
		key := fmt.Sprint("k", i)
		switch i % 3 {
		case 0:
			do(t, s, takeOp(key, fixed, 1))
		case 1:
			do(t, s, takeOp(key, log, 1))
		default:
			storetest.Throttle(context.Background(), s, key, p, 1)
		}
	}
	if st := s.Stats(); st.Keys > 100 || st.Keys == 0 {
		t.Fatalf("MaxKeys 100: holding %d keys", st.Keys)
	}
}

// A decision on a key the store holds allocates nothing, for every algorithm
// but the log (which grows by one entry per unit) and a new lease (whose id
// the store copies): renewing a held lease allocates nothing.
func TestDoZeroAllocs(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	ctx := context.Background()
	res := make([]funnel.Result, 2)
	for _, c := range benchCases(t) {
		if c.name == "sliding_log" {
			continue
		}
		c.op(s, ctx, res) // the key exists from now on
		if n := testing.AllocsPerRun(1000, func() { c.op(s, ctx, res) }); n != 0 {
			t.Errorf("%s: %v allocs per Do", c.name, n)
		}
	}
	renew := []funnel.Op{{Kind: funnel.OpTake, Key: "conc", Limit: check(t, leases), N: 1, Lease: "req-1"}}
	s.Do(ctx, renew, res)
	if n := testing.AllocsPerRun(1000, func() { s.Do(ctx, renew, res) }); n != 0 || !res[0].Allowed {
		t.Errorf("renewing a lease: %v allocs per Do (%+v)", n, res[0])
	}
}

// Keys and lease ids may alias buffers the caller reuses.
func TestFamilyKeysAreCopied(t *testing.T) {
	s, _ := newStore(t, memstore.Options{SweepInterval: -1})
	key, id := []byte("alpha"), []byte("lease-1")
	conc := check(t, leases)
	do(t, s, funnel.Op{Kind: funnel.OpTake, Key: string(key), Limit: conc, N: 1, Lease: string(id)})
	copy(key, "bravo")
	copy(id, "lease-2")
	res := do(t, s, funnel.Op{Kind: funnel.OpRefund, Key: "alpha", Limit: conc, Lease: "lease-1"})
	if !res[0].Allowed {
		t.Fatal("the stored key or lease id changed with the caller's buffer")
	}
}

// The leases' ids are kept in an arena per key, filled again from its
// start when one lease is held and replaced when full: ids granted from a
// reused buffer, many held at once and released in another order, stay
// exactly the ids granted.
func TestLeaseIDsArena(t *testing.T) {
	s, _ := newStore(t, memstore.Options{SweepInterval: -1})
	conc := check(t, funnel.Limit{Algorithm: funnel.Concurrency, Count: 100, Period: time.Minute})
	buf := make([]byte, 0, 64)
	acquire := func(id string) {
		buf = append(buf[:0], id...)
		if r := do(t, s, funnel.Op{Kind: funnel.OpTake, Key: "k", Limit: conc, N: 1, Lease: string(buf)}); !r[0].Allowed {
			t.Fatalf("acquire %s: %+v", id, r[0])
		}
		for i := range buf {
			buf[i] = '#' // the caller reuses its buffer
		}
	}
	held := map[string]bool{}
	for round := range 40 {
		for i := range round%7 + 1 {
			id := fmt.Sprintf("lease-%d-%d-%s", round, i, strings.Repeat("x", round%13))
			acquire(id)
			held[id] = true
		}
		// Release about half, in the map's order.
		n := 0
		for id := range held {
			if n%2 == 0 {
				releaseHeld(t, s, conc, id, true)
				delete(held, id)
			}
			n++
		}
	}
	for id := range held {
		releaseHeld(t, s, conc, id, true)
		releaseHeld(t, s, conc, id, false)
	}
}

// releaseHeld releases lease id of key "k" with a latency, which is an
// error when the lease is not held, and fails unless held is as given.
func releaseHeld(t *testing.T, s *memstore.Store, conc funnel.Checked, id string, held bool) {
	t.Helper()
	res := make([]funnel.Result, 1)
	err := s.Do(context.Background(), []funnel.Op{{Kind: funnel.OpRefund, Key: "k", Limit: conc, Lease: id, Latency: time.Millisecond}}, res)
	if got := err == nil && res[0].Allowed; got != held {
		t.Fatalf("release %s: %+v, %v; want held %v", id, res[0], err, held)
	}
}

// Several keys at once, with a funnel key also charged by Throttle and by
// single-key Do from other goroutines, stay exact: the funnel admits exactly
// limit + elapsed/T, so no charge was lost to a concurrent one.
func TestManyKeysExactWithThrottle(t *testing.T) {
	s, clock := newStore(t, memstore.Options{Shards: 4, SweepInterval: -1})
	ctx := context.Background()
	gl := funnel.Limit{Count: 10, Period: time.Second, Burst: 4} // T = 100 ms, limit 5
	g := check(t, gl)
	wide := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1 << 40, Period: time.Hour})
	const steps, stepLen, workers = 40, 250 * time.Millisecond, 4
	var admitted atomic.Int64
	for i := range steps {
		clock.Set(storetest.Epoch + int64(i)*int64(stepLen))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := make([]funnel.Result, 3)
				for j := range 100 {
					var ok bool
					switch (j + w) % 3 {
					case 0:
						r, err := storetest.Throttle(ctx, s, "hot", g.GCRA, 1)
						if err != nil {
							t.Error(err)
							return
						}
						ok = r.Allowed
					case 1:
						ops := []funnel.Op{takeOp(fmt.Sprint("w", w), wide, 1), takeOp("hot", g, 1), takeOp(fmt.Sprint("v", j%7), wide, 1)}
						if err := s.Do(ctx, ops, res); err != nil {
							t.Error(err)
							return
						}
						ok = res[1].Allowed && res[0].Allowed && res[2].Allowed
					default:
						if err := s.Do(ctx, []funnel.Op{takeOp("hot", g, 1)}, res); err != nil {
							t.Error(err)
							return
						}
						ok = res[0].Allowed
					}
					if ok {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	want := g.GCRA.Limit + int64(steps-1)*int64(stepLen)/g.GCRA.Interval
	if got := admitted.Load(); got != want {
		t.Fatalf("admitted %d, want exactly %d", got, want)
	}
}

// Calls over many shards, in every order, never deadlock.
func TestManyKeysNoDeadlock(t *testing.T) {
	s, _ := newStore(t, memstore.Options{Shards: 8, SweepInterval: -1})
	wide := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1 << 40, Period: time.Hour})
	g := check(t, funnel.Limit{Count: 1e6, Period: time.Second, Burst: 1 << 30})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := make([]funnel.Result, 12)
			ops := make([]funnel.Op, 0, 12)
			for i := range 500 {
				ops = ops[:0]
				for k := range 12 {
					idx := (i*7 + w*5 + k*(w+1)) % 40
					key := fmt.Sprint("k", idx)
					dup := false
					for _, o := range ops {
						dup = dup || o.Key == key
					}
					if dup {
						continue
					}
					c := wide
					if idx%2 == 0 {
						c = g
					}
					ops = append(ops, takeOp(key, c, 1))
				}
				if err := s.Do(context.Background(), ops, res); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("Do calls over shared shards did not finish: deadlock")
	}
}

type benchCase struct {
	name string
	op   func(s *memstore.Store, ctx context.Context, res []funnel.Result)
}

// benchCases are one decision per algorithm on one key, under limits that
// admit every request for the length of a benchmark (the sliding log: 2^20
// per millisecond, so its log holds the last millisecond's requests).
func benchCases(t testing.TB) []benchCase {
	gcraC := check(t, funnel.Limit{Count: 1e6, Period: time.Second, Burst: 1 << 30})
	leakyC := check(t, funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 1e6, Period: time.Second, Burst: 1 << 30, DelayUnits: funnel.NoDelay})
	banC := check(t, funnel.Limit{Count: 1e6, Period: time.Second, Burst: 1 << 30, Ban: time.Minute})
	fixedC := check(t, funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1 << 40, Period: time.Hour})
	slidingC := check(t, funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 1 << 30, Period: time.Hour})
	logC := check(t, funnel.Limit{Algorithm: funnel.SlidingLog, Count: 1 << 20, Period: time.Millisecond})
	concC := check(t, funnel.Limit{Algorithm: funnel.Concurrency, Count: 1000, Period: time.Minute})
	release := funnel.Checked{Limit: funnel.Limit{Algorithm: funnel.Concurrency}}
	one := func(key string, c funnel.Checked) func(*memstore.Store, context.Context, []funnel.Result) {
		ops := []funnel.Op{takeOp(key, c, 1)}
		return func(s *memstore.Store, ctx context.Context, res []funnel.Result) { s.Do(ctx, ops, res) }
	}
	lease := []funnel.Op{{Kind: funnel.OpTake, Key: "user:conc", Limit: concC, N: 1, Lease: "req-1"}}
	unlease := []funnel.Op{{Kind: funnel.OpRefund, Key: "user:conc", Limit: release, Lease: "req-1"}}
	pair := []funnel.Op{takeOp("{user:42}:s", gcraC, 1), takeOp("{user:42}:d", fixedC, 1)}
	return []benchCase{
		{"gcra", one("user:gcra", gcraC)},
		{"gcra_ban", one("user:ban", banC)},
		{"leaky_bucket", one("user:leaky", leakyC)},
		{"fixed_window", one("user:fixed", fixedC)},
		{"sliding_window", one("user:sliding", slidingC)},
		{"sliding_log", one("user:log", logC)},
		{"concurrency", func(s *memstore.Store, ctx context.Context, res []funnel.Result) {
			s.Do(ctx, lease, res)
			s.Do(ctx, unlease, res)
		}},
		{"gcra+fixed_window", func(s *memstore.Store, ctx context.Context, res []funnel.Result) { s.Do(ctx, pair, res) }},
	}
}

// BenchmarkDo is one Do call per algorithm on one hot key, from
// b.RunParallel goroutines (-cpu 1,2 shows contention). concurrency is an
// acquire and a release; gcra+fixed_window is one call of two keys.
func BenchmarkDo(b *testing.B) {
	for _, c := range benchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			s := memstore.New(memstore.Options{})
			defer s.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				res := make([]funnel.Result, 2)
				for pb.Next() {
					c.op(s, ctx, res)
				}
			})
		})
	}
}
