package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/leasestore"
	"github.com/funnelrl/funnel/redisstore"
)

// overloadRate is the limit of BenchmarkLease's overload rows: 20,000 per
// second, with the burst of the row; 2,000 per second at 100×, so that the
// demand (200,000 per second) can be paced on a small machine (workers
// that never wait starve the goroutines that bring the leases back).
func (c overloadCase) rate() int64 {
	if c.factor >= 100 {
		return 2000
	}
	return 20000
}

// overloadCase is one overload row: nodes, the limit's burst, the demand
// as a multiple of the rate, and whether node 0 gets ten times the demand
// of each other node.
type overloadCase struct {
	nodes   int
	burst   int64
	factor  float64
	unequal bool
}

func (c overloadCase) name() string {
	s := fmt.Sprintf("%gx%d/burst%d/nodes%d", c.factor, c.rate(), c.burst, c.nodes)
	if c.unequal {
		s += "/unequal10to1"
	}
	return s
}

// overloadCases are the rows: 2×, 10× and 100× the rate; bursts 0, 10,
// 500 and 10,000; 3 and 16 nodes; with equal demand, and 10:1 for a few;
// and near the limit (1.05×, 1.2×, 1.5×) the smooth limit (burst 500).
func overloadCases() []overloadCase {
	var cs []overloadCase
	for _, f := range []float64{0.5, 0.9} {
		// Below the limit: under-% is the requests refused that one exact
		// funnel admits.
		for _, burst := range []int64{500, 10000} {
			for _, n := range []int{3, 16} {
				cs = append(cs, overloadCase{nodes: n, burst: burst, factor: f})
			}
		}
	}
	for _, f := range []float64{1.05, 1.2, 1.5} {
		for _, n := range []int{3, 16} {
			cs = append(cs, overloadCase{nodes: n, burst: 500, factor: f})
		}
		cs = append(cs, overloadCase{nodes: 16, burst: 500, factor: f, unequal: true})
	}
	for _, f := range []float64{2, 10, 100} {
		for _, burst := range []int64{0, 10, 500, 10000} {
			for _, n := range []int{3, 16} {
				cs = append(cs, overloadCase{nodes: n, burst: burst, factor: f})
			}
		}
	}
	for _, f := range []float64{2, 10} {
		for _, n := range []int{3, 16} {
			cs = append(cs, overloadCase{nodes: n, burst: 500, factor: f, unequal: true})
		}
	}
	return cs
}

// benchLeaseOverload offers a few seconds of demand at c.factor times the
// limit (20,000/s, or 2,000/s at 100×; the row's burst) to one hot key,
// from workers spread over c.nodes nodes (leasing, or deciding every
// request in Redis), paced (the factor reached is reported: plain Redis
// falls behind at 10×; "shares" leases in rate shares, "lease" in units).
// It reports decisions/s, Redis
// script calls, script time and CPU per decision (from the server's own
// counters),
// the admissions over one exact funnel (replayed at the instant each was
// answered, with 5 ms for reading that instant late: must be 0), and the
// under-admission against one exact funnel given the same arrivals, over
// the run and over its last second (steady state: it starts once the
// exact funnel's burst is spent, after a second and near the limit after
// the burst over the excess demand).
func benchLeaseOverload(b *testing.B, srv *redistest.Server, kind string, oc overloadCase) {
	var stores []funnel.Store
	var leases []*leasestore.Store
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	for range oc.nodes {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		rs := redisstore.New(c, redisstore.Options{Prefix: "over:", Timeout: time.Second})
		closers = append(closers, func() { c.Close() })
		if kind == "redis" {
			stores = append(stores, rs)
			continue
		}
		ls := leasestore.New(rs, leasestore.Options{Logger: slog.New(slog.DiscardHandler), Shares: kind == "shares"})
		stores = append(stores, ls)
		leases = append(leases, ls)
		closers = append(closers, func() { ls.Close() })
	}
	rate := oc.rate()
	c, err := funnel.Limit{Count: rate, Period: time.Second, Burst: oc.burst}.Check()
	if err != nil {
		b.Fatal(err)
	}
	// Workers: a share of demand per node (node 0 ten with unequal
	// demand), about 48 workers in all.
	shares := make([]int, oc.nodes)
	total := 0
	for i := range shares {
		shares[i] = 1
		if oc.unequal && i == 0 {
			shares[i] = 10
		}
		total += shares[i]
	}
	per := max(1, 48/total)
	var workerNode []int
	for i, s := range shares {
		for range s * per {
			workerNode = append(workerNode, i)
		}
	}
	workers := len(workerNode)
	// The second measured (steady state) starts once the exact funnel's
	// burst is spent: after a second, and near the limit after the burst
	// over the excess demand (1.05× with a burst of 500: half a second).
	warm := time.Second
	if oc.factor > 1 {
		warm += time.Duration(float64(oc.burst+1) / (oc.factor - 1) / float64(rate) * float64(time.Second))
	}
	run := warm + time.Second
	offered := int64(oc.factor * float64(rate))
	gap := time.Duration(int64(time.Second) * int64(workers) / offered)
	type event struct {
		at      int64
		allowed bool
	}
	var mu sync.Mutex
	var events []event
	var failed atomic.Int64
	if err := srv.Client().ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := redisCPU(b, srv)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := stores[workerNode[w]]
			res := make([]funnel.Result, 1)
			ops := []funnel.Op{{Kind: funnel.OpTake, Key: hotKey, N: 1, Limit: c}}
			local := make([]event, 0, 1024)
			end := start.Add(run)
			due := start.Add(time.Duration(w) * gap / time.Duration(workers))
			for due.Before(end) {
				if d := time.Until(due); d > 0 {
					time.Sleep(d) // pacing the offered load, not waiting for a state
				}
				due = due.Add(gap)
				arrived := time.Now().UnixNano()
				err := st.Do(context.Background(), ops, res)
				if err != nil || res[0].Fallback {
					failed.Add(1)
				}
				if res[0].Allowed {
					local = append(local, event{time.Now().UnixNano(), true})
				}
				local = append(local, event{arrived, false})
			}
			mu.Lock()
			events = append(events, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu1 := redisCPU(b, srv)
	calls, usec := scriptStats(b, srv)
	p, err := gcra.NewParams(oc.burst, rate, time.Second)
	if err != nil {
		b.Fatal(err)
	}
	slices.SortFunc(events, func(a, b event) int { return int(a.at - b.at) })
	replay := p
	replay.Tolerance += int64(5 * time.Millisecond)
	var tat, exactTAT int64
	var admitted, over, exact, arrivals, admitted2, exact2 int64
	half := start.Add(warm).UnixNano()
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
	dec := float64(max(arrivals, 1))
	b.ReportMetric(dec/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(dec/elapsed.Seconds()/float64(rate), "x-limit")
	b.ReportMetric(float64(calls)/dec, "redis-calls/op")
	b.ReportMetric(usec/dec, "redis-µs/op")
	b.ReportMetric((cpu1-cpu0)*1e6/dec, "redis-cpu-µs/op")
	b.ReportMetric(float64(over), "over-admitted")
	b.ReportMetric(100*float64(exact-admitted)/float64(max(exact, 1)), "under-%")
	b.ReportMetric(100*float64(exact2-admitted2)/float64(max(exact2, 1)), "steady-under-%")
	if leases != nil {
		var st leasestore.Stats
		for _, l := range leases {
			s := l.Stats()
			st.Calls += s.Calls
			st.Direct += s.Direct
			st.Forfeited += s.Forfeited
		}
		b.ReportMetric(float64(st.Calls+st.Direct)/dec, "calls/op")
		b.ReportMetric(float64(st.Direct)/dec, "direct/op")
		b.ReportMetric(float64(st.Forfeited), "forfeited")
	}
	if n := failed.Load(); n > 0 {
		b.ReportMetric(float64(n), "errors")
	}
}
