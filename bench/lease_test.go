package bench

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// leaseNodes is the fleet of BenchmarkLease: processes that share limits
// through one Redis, each with its own client (and, leasing, its own
// leases).
const leaseNodes = 16

// leaseFleet is one way to run BenchmarkLease's fleet: n stores, and what
// they count.
type leaseFleet struct {
	stores []funnel.Store
	leases []*leasestore.Store // nil unless leasing
	close  func()
}

func newLeaseFleet(b *testing.B, kind, addr string) leaseFleet {
	var f leaseFleet
	var closers []func()
	switch kind {
	case "memory":
		s := memstore.New(memstore.Options{})
		f.stores = []funnel.Store{s}
		closers = append(closers, func() { s.Close() })
	default:
		for range leaseNodes {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			rs := redisstore.New(c, redisstore.Options{Prefix: "lease:", Timeout: time.Second})
			closers = append(closers, func() { c.Close() })
			if kind == "redis16" {
				f.stores = append(f.stores, rs)
				continue
			}
			ls := leasestore.New(rs, leasestore.Options{Logger: slog.New(slog.DiscardHandler)})
			f.stores = append(f.stores, ls)
			f.leases = append(f.leases, ls)
			closers = append(closers, func() { ls.Close() })
		}
	}
	f.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	return f
}

func (f leaseFleet) stats() leasestore.Stats {
	var t leasestore.Stats
	for _, s := range f.leases {
		st := s.Stats()
		t.Decisions += st.Decisions
		t.Local += st.Local
		t.Calls += st.Calls
		t.Leased += st.Leased
		t.Spent += st.Spent
		t.Forfeited += st.Forfeited
		t.Direct += st.Direct
	}
	return t
}

// zipfKeys draws keys of 100,000 by a Zipf law (s = 1.1): a few keys take
// most requests, as tenants and API keys do.
func zipfKeys(n int) []string {
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(len(keys)-1))
	out := make([]string, n)
	for i := range out {
		out[i] = keys[z.Uint64()]
	}
	return out
}

// BenchmarkLease compares a fleet of 16 processes leasing their funnels
// from one Redis (package leasestore, 200 ms leases) with the same fleet
// deciding every request in Redis, and with one memory store, on one hot
// key (a funnel, and a fixed window: hotfixed) and on 100,000 keys drawn by
// a Zipf law:
//
//   - throughput: 32 goroutines per CPU, spread over the nodes, under a
//     limit that admits every request (throughputSpec): decisions/s,
//     Redis calls per decision, and p50/p99 decision latency;
//   - steady: two seconds of requests offered at twice the limit
//     (20,000/s, a burst of 10,000) to one hot key, from 64 goroutines
//     over the nodes: the admissions, replayed at the instant each was
//     answered through one exact funnel, over-admitted (must be 0); the
//     under-admission, the exact funnel's admissions of the same arrivals
//     less the fleet's, as a share of the exact funnel's, over the whole
//     run (the reduced burst shows there) and over its second second (the
//     steady state); the units forfeited, and the share of decisions that
//     waited on Redis;
//   - overload: one hot key at 2×, 10× and 100× its limit (20,000/s), bursts
//     0, 10, 500 and 10,000, and near it (1.05×, 1.2×, 1.5×) with a burst
//     of 500, 3 and 16 nodes, equal demand and 10:1 (see
//     benchLeaseOverload): decisions/s, Redis commands and CPU per
//     decision, over- and under-admission, each leasing row (in units:
//     lease; in rate shares: shares) beside the same fleet on plain Redis.
func BenchmarkLease(b *testing.B) {
	srv := redistest.StartServer(b)
	for _, scen := range []string{"hot", "hotfixed", "zipf100k"} {
		for _, kind := range []string{"lease16", "redis16", "memory"} {
			b.Run("throughput/"+scen+"/"+kind, func(b *testing.B) {
				srv.Client().FlushAll(context.Background())
				benchLeaseThroughput(b, newLeaseFleet(b, kind, srv.Addr), scen)
			})
		}
	}
	for _, kind := range []string{"lease16", "redis16"} {
		b.Run("steady/hot/"+kind, func(b *testing.B) {
			srv.Client().FlushAll(context.Background())
			benchLeaseSteady(b, newLeaseFleet(b, kind, srv.Addr))
		})
	}
	for _, oc := range overloadCases() {
		for _, kind := range []string{"lease", "shares", "redis"} {
			b.Run("overload/"+oc.name()+"/"+kind, func(b *testing.B) {
				srv.Client().FlushAll(context.Background())
				benchLeaseOverload(b, srv, kind, oc)
			})
		}
	}
}

func benchLeaseThroughput(b *testing.B, f leaseFleet, scen string) {
	defer f.close()
	l := funnel.Per(throughputSpec.count, throughputSpec.period)
	if scen == "hotfixed" {
		l = funnel.Limit{Algorithm: funnel.FixedWindow, Count: throughputSpec.count, Period: throughputSpec.period}
	}
	c, err := l.Check()
	if err != nil {
		b.Fatal(err)
	}
	keys := []string{hotKey}
	if scen == "zipf100k" {
		keys = zipfKeys(1 << 16)
	}
	var next atomic.Uint64
	var mu sync.Mutex
	var lat []time.Duration
	var refused, failed atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		st := f.stores[g%uint64(len(f.stores))]
		res := make([]funnel.Result, 1)
		ops := []funnel.Op{{Kind: funnel.OpTake, N: 1, Limit: c}}
		i := g * 7919
		var local []time.Duration
		for pb.Next() {
			ops[0].Key = keys[i%uint64(len(keys))]
			i++
			t0 := time.Now()
			err := st.Do(context.Background(), ops, res)
			local = append(local, time.Since(t0))
			switch {
			case err != nil || res[0].Fallback:
				failed.Add(1)
			case !res[0].Allowed:
				refused.Add(1)
			}
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	}
	if f.leases != nil {
		st := f.stats()
		b.ReportMetric(float64(st.Calls+st.Direct)/float64(b.N), "calls/op")
		b.ReportMetric(float64(st.Decisions-st.Local)/float64(b.N), "waited/op")
	} else if len(f.stores) > 1 {
		b.ReportMetric(1, "calls/op")
	}
	if n := refused.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "denied/op")
	}
	if n := failed.Load(); n > 0 {
		b.ReportMetric(float64(n)/float64(b.N), "errors/op")
	}
}

// benchLeaseSteady offers two seconds of requests at twice the limit,
// paced, from 64 goroutines over the fleet. b.N does not count: the run is
// two seconds, whatever b.N.
func benchLeaseSteady(b *testing.B, f leaseFleet) {
	defer f.close()
	const rate, burst = 20000, 10000
	c, err := funnel.Limit{Count: rate, Period: time.Second, Burst: burst - 1}.Check()
	if err != nil {
		b.Fatal(err)
	}
	const workers, run = 64, 2 * time.Second
	offered := 2 * rate
	gap := time.Duration(int64(time.Second) * workers / int64(offered))
	type event struct {
		at      int64
		allowed bool
	}
	var mu sync.Mutex
	var events []event
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := f.stores[w%len(f.stores)]
			res := make([]funnel.Result, 1)
			ops := []funnel.Op{{Kind: funnel.OpTake, Key: hotKey, N: 1, Limit: c}}
			var local []event
			due := start.Add(time.Duration(w) * gap / workers)
			for due.Before(start.Add(run)) {
				if d := time.Until(due); d > 0 {
					time.Sleep(d) // pacing the offered load, not waiting for a state
				}
				arrived := time.Now().UnixNano()
				err := st.Do(context.Background(), ops, res)
				if err != nil || res[0].Fallback {
					failed.Add(1)
				}
				if res[0].Allowed {
					local = append(local, event{time.Now().UnixNano(), true})
				}
				local = append(local, event{arrived, false})
				due = due.Add(gap)
			}
			mu.Lock()
			events = append(events, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	p, err := gcra.NewParams(burst-1, rate, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	// Replay: admissions (allowed) at the instant they were answered, under
	// the limit, with 5 ms for the late reading of that instant; and the
	// arrivals (not allowed) through one exact funnel.
	replay := p
	replay.Tolerance += int64(5 * time.Millisecond)
	var tat, exactTAT int64
	var admitted, over, exact, arrivals, admitted2, exact2 int64
	half := start.Add(run / 2).UnixNano()
	for _, e := range events {
		if e.allowed {
			admitted++
			if e.at >= half {
				admitted2++
			}
			var r gcra.Result
			if tat, r, _ = gcra.Decide(e.at, tat, replay, 1); !r.Allowed {
				over++
			}
			continue
		}
		arrivals++
		var r gcra.Result
		if exactTAT, r, _ = gcra.Decide(e.at, exactTAT, p, 1); r.Allowed {
			exact++
			if e.at >= half {
				exact2++
			}
		}
	}
	b.ReportMetric(float64(arrivals), "offered")
	b.ReportMetric(float64(admitted), "admitted")
	b.ReportMetric(float64(over), "over-admitted")
	b.ReportMetric(100*float64(exact-admitted)/float64(max(exact, 1)), "under-%")
	b.ReportMetric(100*float64(exact2-admitted2)/float64(max(exact2, 1)), "steady-under-%")
	if f.leases != nil {
		st := f.stats()
		b.ReportMetric(float64(st.Calls+st.Direct)/float64(max(st.Decisions, 1)), "calls/op")
		b.ReportMetric(float64(st.Forfeited), "forfeited")
		b.ReportMetric(float64(st.Decisions-st.Local)/float64(max(st.Decisions, 1)), "waited/op")
	}
	if n := failed.Load(); n > 0 {
		b.ReportMetric(float64(n), "errors")
	}
}
