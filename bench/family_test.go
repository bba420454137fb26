package bench

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// familyCase is one algorithm of the family as the benchmarks drive it: a
// limit that admits (almost) every request, so that every decision writes.
type familyCase struct {
	name  string
	limit funnel.Limit
	// multi, when set, asks for a second limit on a key of the same hash
	// slot in the same call (all-or-nothing).
	multi *funnel.Limit
	// latency, for concurrency, is reported with each release
	// (Limiter.ReleaseAfter), which moves the key's unit delay.
	latency time.Duration
}

var familyCases = func() []familyCase {
	gcra := funnel.Per(1_000_000_000, 1000*time.Second)
	leaky := gcra
	leaky.Algorithm, leaky.DelayUnits = funnel.LeakyBucket, funnel.NoDelay
	window := func(a funnel.Algorithm) funnel.Limit {
		return funnel.Limit{Algorithm: a, Count: 1_000_000_000, Period: 1000 * time.Second}
	}
	day := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1_000_000_000, Calendar: funnel.Daily}
	return []familyCase{
		{name: "gcra", limit: gcra},
		{name: "leaky_bucket", limit: leaky},
		{name: "fixed_window", limit: window(funnel.FixedWindow)},
		{name: "sliding_window", limit: window(funnel.SlidingWindow)},
		// The log keeps an entry per admitted unit: 100 per second, so that a
		// hot key is mostly refused (at a full log) and other keys admitted.
		{name: "sliding_log", limit: funnel.Limit{Algorithm: funnel.SlidingLog, Count: 100, Period: time.Second}},
		{name: "concurrency", limit: funnel.Limit{Algorithm: funnel.Concurrency, Count: 1_000_000, Period: time.Minute}},
		// limit.conn's queue: a burst and a unit delay, each release
		// reporting a latency.
		{name: "concurrency+burst", limit: funnel.Limit{Algorithm: funnel.Concurrency, Count: 1_000_000, Period: time.Minute,
			Burst: 1000, UnitDelay: 10 * time.Millisecond}, latency: 3 * time.Millisecond},
		{name: "gcra+day", limit: gcra, multi: &day},
	}
}()

// familyDecide returns a function that makes one decision of c on key
// through lim: for concurrency an acquire and its release (with a latency
// when c has one), for a multi case both limits at once.
func familyDecide(c familyCase, lim *funnel.Limiter) func(ctx context.Context, key string) (bool, error) {
	switch {
	case c.limit.Algorithm == funnel.Concurrency:
		return func(ctx context.Context, key string) (bool, error) {
			l, r, err := lim.Acquire(ctx, key, c.limit)
			if err != nil || !r.Allowed {
				return r.Allowed, err
			}
			if c.latency > 0 {
				_, err = lim.ReleaseAfter(ctx, l, c.latency)
			} else {
				_, err = lim.Release(ctx, l)
			}
			return true, err
		}
	case c.multi != nil:
		pairs := taggedPairs()
		// A caller's buffers, kept from call to call (AllowAllInto).
		type bufs struct {
			reqs [2]funnel.Request
			res  [2]funnel.Result
		}
		pool := sync.Pool{New: func() any { return new(bufs) }}
		return func(ctx context.Context, key string) (bool, error) {
			pair, ok := pairs[key]
			if !ok { // a key of neither scenario (the warm-up's)
				pair = [2]string{"{" + key + "}:s", "{" + key + "}:d"}
			}
			b := pool.Get().(*bufs)
			b.reqs = [2]funnel.Request{
				{Key: pair[0], Limit: c.limit, N: 1},
				{Key: pair[1], Limit: *c.multi, N: 1},
			}
			m, err := lim.AllowAllInto(ctx, b.reqs[:], b.res[:])
			pool.Put(b)
			return m.Allowed, err
		}
	}
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.Allow(ctx, key, c.limit)
		if r.Fallback {
			return false, errFallback
		}
		return r.Allowed, err
	}
}

var (
	pairsOnce sync.Once
	pairs     map[string][2]string
)

// taggedPairs returns, for the hot key and each key of keys100k, the two
// keys of a multi case, "{key}:s" and "{key}:d" (one hash slot), built once
// so that the benchmark's own string building is not counted as the
// limiter's work.
func taggedPairs() map[string][2]string {
	pairsOnce.Do(func() {
		keys, _ := keyData()
		pairs = make(map[string][2]string, len(keys)+1)
		for _, k := range append([]string{hotKey}, keys...) {
			pairs[k] = [2]string{"{" + k + "}:s", "{" + k + "}:d"}
		}
	})
	return pairs
}

// BenchmarkFamily measures every algorithm of the family on the memory
// store, through Limiter (one hot key, and 100,000 keys in random order),
// beside ulule/limiter's fixed window on its memory store, the anchor of
// the same algorithm.
func BenchmarkFamily(b *testing.B) {
	for _, scenario := range []string{"hot", "keys100k"} {
		for _, c := range familyCases {
			b.Run(scenario+"/funnel-"+c.name, func(b *testing.B) {
				store := memstore.New(memstore.Options{})
				defer store.Close()
				benchDecide(b, scenario, familyDecide(c, funnel.New(store)), 0)
			})
		}
		b.Run(scenario+"/ulule-fixed_window", func(b *testing.B) {
			lim := ulule.New(ululemem.NewStore(), ulule.Rate{Period: 1000 * time.Second, Limit: 1_000_000_000})
			benchDecide(b, scenario, func(ctx context.Context, key string) (bool, error) {
				r, err := lim.Get(ctx, key)
				return !r.Reached, err
			}, 0)
		})
	}
}

// benchDecide runs decide over the scenario's keys, in parallel when
// parallel > 0 (goroutines per CPU), and reports the outcomes.
func benchDecide(b *testing.B, scenario string, decide func(context.Context, string) (bool, error), parallel int) {
	ctx := context.Background()
	keys, seq := keyData()
	var c outcomes
	b.ReportAllocs()
	b.ResetTimer()
	run := func(local *outcomes, r *rand.Rand, next func() bool) {
		i := r.Uint32()
		for next() {
			key := hotKey
			if scenario == "keys100k" {
				key = keys[seq[i&(seqLen-1)]]
				i++
			}
			local.count(decide(ctx, key))
		}
	}
	if parallel == 0 {
		n := 0
		run(&c, rand.New(rand.NewPCG(seeds.Add(1), 1)), func() bool { n++; return n <= b.N })
	} else {
		b.SetParallelism(parallel)
		b.RunParallel(func(pb *testing.PB) {
			var local outcomes
			run(&local, rand.New(rand.NewPCG(seeds.Add(1), 1)), pb.Next)
			c.add(&local)
		})
	}
	b.StopTimer()
	c.report(b)
}

// BenchmarkFamilyRedis measures every algorithm of the family on one
// redis-server that the benchmark starts, one decision at a time (so that
// each decision is one script call): redis-µs/op is the CPU Redis spent in
// the scripts per decision (INFO commandstats), redis-cpu-µs/op the whole
// process's. redis_rate's script is the anchor (BenchmarkRedis has it too).
//
// The par32 rows run 32 callers per CPU at once, as BenchmarkRedis's do:
// the store then decides the takes of a funnel, a delaying bucket and a
// window in batches (one script call for several decisions), the others
// one call each.
//
// The server has Funnel's module loaded (module/funnel.c, built with cc):
// the funnel-<algorithm> rows keep to the scripts (Options.ScriptOnly), and
// the funnel-module-<algorithm> rows go through the module, which makes
// every decision of these rows (redis-µs/op then counts its commands).
func BenchmarkFamilyRedis(b *testing.B) {
	srv := redistest.StartServer(b, "--loadmodule", redistest.Module(b))
	for _, mode := range []struct {
		prefix   string
		parallel int
	}{{"", 0}, {"par32/", 32}} {
		for _, scenario := range []string{"hot", "keys100k"} {
			for _, c := range familyCases {
				b.Run(mode.prefix+scenario+"/funnel-"+c.name, func(b *testing.B) {
					benchFamilyRedis(b, srv, scenario, c, mode.parallel, false)
				})
			}
			for _, c := range familyCases {
				b.Run(mode.prefix+scenario+"/funnel-module-"+c.name, func(b *testing.B) {
					benchFamilyRedis(b, srv, scenario, c, mode.parallel, true)
				})
			}
			for _, l := range redisLimiters {
				if l.name == "redis_rate" {
					b.Run(mode.prefix+scenario+"/"+l.name, func(b *testing.B) { benchRedis(b, srv, l, scenario, mode.parallel) })
				}
			}
		}
	}
}

func benchFamilyRedis(b *testing.B, srv *redistest.Server, scenario string, c familyCase, parallel int, module bool) {
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.FlushAll(ctx).Err(); err != nil { // the benchmark's own server
		b.Fatal(err)
	}
	client := newGoRedis(srv.Addr)
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Prefix: "funnel:", ScriptOnly: !module, Logger: slog.New(slog.DiscardHandler)})
	decide := familyDecide(c, funnel.New(store))
	for i := 0; i < 100; i++ { // connections, the script cache
		if _, err := decide(ctx, "warm:"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpuBefore := redisCPU(b, srv)
	benchDecide(b, scenario, decide, parallel)
	cpuAfter := redisCPU(b, srv)
	calls, usec := scriptStats(b, srv)
	if calls == 0 {
		b.Fatal("Redis ran no script")
	}
	if modules := moduleCalls(b, srv); module != (modules > 0) {
		b.Fatalf("%d of %d calls through the module (module row: %v)", modules, calls, module)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	b.ReportMetric((cpuAfter-cpuBefore)*1e6/float64(b.N), "redis-cpu-µs/op")
}
