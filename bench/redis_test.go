package bench

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// redisLimiter is a limiter whose state lives in Redis.
type redisLimiter struct {
	name string
	// new returns the limiter's allow function on a fresh client of addr,
	// and a function that closes the client.
	new func(b *testing.B, addr string) (allow func(ctx context.Context, key string) (bool, error), close func())
}

// newGoRedis returns the client every go-redis based limiter uses: go-redis's
// defaults (a pool of 10 connections per CPU), with context deadlines
// honoured as redisstore.Open sets them.
func newGoRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

// funnelAllow returns the allow function of a Funnel limiter on store.
func funnelAllow(b *testing.B, store *redisstore.Store) func(context.Context, string) (bool, error) {
	lim := funnel.New(store)
	lc, err := funnel.Per(throughputSpec.count, throughputSpec.period).Check()
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, key string) (bool, error) {
		r, err := lim.AllowChecked(ctx, key, &lc, 1)
		if r.Fallback {
			return false, errFallback
		}
		return r.Allowed, err
	}
}

var redisLimiters = []redisLimiter{
	{"funnel-redis", func(b *testing.B, addr string) (func(context.Context, string) (bool, error), func()) {
		c := newGoRedis(addr)
		return funnelAllow(b, redisstore.New(c, redisstore.Options{Prefix: "funnel:", ScriptOnly: true})), func() { c.Close() }
	}},
	{"funnel-redis-rueidis", func(b *testing.B, addr string) (func(context.Context, string) (bool, error), func()) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		return funnelAllow(b, redisstore.NewRueidis(c, redisstore.Options{Prefix: "funnel:", ScriptOnly: true})), c.Close
	}},
	// The same store as funnel-redis, through Funnel's module, which the
	// benchmark's Redis has loaded (without the log line that says the
	// module is used, which would cut the benchmark's output).
	{"funnel-redis-module", func(b *testing.B, addr string) (func(context.Context, string) (bool, error), func()) {
		c := newGoRedis(addr)
		opts := redisstore.Options{Prefix: "funnel:", Logger: slog.New(slog.DiscardHandler)}
		return funnelAllow(b, redisstore.New(c, opts)), func() { c.Close() }
	}},
	{"redis_rate", func(b *testing.B, addr string) (func(context.Context, string) (bool, error), func()) {
		c := newGoRedis(addr)
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: int(throughputSpec.count), Burst: int(throughputSpec.count), Period: throughputSpec.period}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, key, limit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}, func() { c.Close() }
	}},
}

type benchError string

func (e benchError) Error() string { return string(e) }

// errFallback counts a Funnel decision that fell back (Redis too slow) as an
// error of the benchmark.
const errFallback = benchError("redisstore answered with the fallback")

// BenchmarkRedis compares rate limiters that keep their state in Redis, on
// one redis-server that the benchmark starts (persistence off), with
// throughputSpec, so that every request is allowed and written:
//
//   - serial: one goroutine, one request at a time (the round trip);
//   - par32: b.SetParallelism(32), 32 goroutines per CPU (throughput);
//
// each on one hot key and on 100,000 keys in random order. Besides ns/op and
// allocs/op it reports decisions/s, redis-µs/op (the CPU Redis spent in the
// limiter's script per decision, from INFO commandstats: usec of evalsha and
// eval, or of Funnel's module's FUNNEL.GCRA, over the number of decisions)
// and redis-cpu-µs/op (the whole CPU of the redis-server process per
// decision, network I/O included, from INFO cpu). The server has loaded
// Funnel's module (built from module/funnel.c with cc): funnel-redis-module
// decides through it, and the other funnel rows through the script
// (redisstore.Options.ScriptOnly).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.StartServer(b, "--loadmodule", redistest.Module(b))
	for _, mode := range []struct {
		name     string
		parallel int
	}{{"serial", 0}, {"par32", 32}} {
		for _, scenario := range []string{"hot", "keys100k"} {
			for _, l := range redisLimiters {
				b.Run(mode.name+"/"+scenario+"/"+l.name, func(b *testing.B) {
					benchRedis(b, srv, l, scenario, mode.parallel)
				})
			}
		}
	}
}

func benchRedis(b *testing.B, srv *redistest.Server, l redisLimiter, scenario string, parallel int) {
	ctx := context.Background()
	admin := srv.Client()
	if err := admin.FlushAll(ctx).Err(); err != nil { // the benchmark's own server
		b.Fatal(err)
	}
	allow, closeClient := l.new(b, srv.Addr)
	defer closeClient()
	keys, seq := keyData()
	// Warm up: connections, the script cache.
	for i := 0; i < 100; i++ {
		if _, err := allow(ctx, hotKey); err != nil {
			b.Fatal(err)
		}
	}
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpuBefore := redisCPU(b, srv)
	var c outcomes
	b.ReportAllocs()
	b.ResetTimer()
	if parallel == 0 {
		r := rand.New(rand.NewPCG(seeds.Add(1), 0x9e3779b97f4a7c15))
		i := r.Uint32()
		for range b.N {
			key := hotKey
			if scenario == "keys100k" {
				key = keys[seq[i&(seqLen-1)]]
				i++
			}
			c.count(allow(ctx, key))
		}
	} else {
		b.SetParallelism(parallel)
		b.RunParallel(func(pb *testing.PB) {
			r := rand.New(rand.NewPCG(seeds.Add(1), 0x9e3779b97f4a7c15))
			i := r.Uint32()
			var local outcomes
			for pb.Next() {
				key := hotKey
				if scenario == "keys100k" {
					key = keys[seq[i&(seqLen-1)]]
					i++
				}
				local.count(allow(ctx, key))
			}
			c.add(&local)
		})
	}
	b.StopTimer()
	cpuAfter := redisCPU(b, srv)
	calls, usec := scriptStats(b, srv)
	c.report(b)
	if calls == 0 || calls > int64(b.N)+1 {
		b.Fatalf("Redis ran the script %d times for %d decisions", calls, b.N)
	}
	b.ReportMetric(float64(b.N)/float64(calls), "decisions/call")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	b.ReportMetric((cpuAfter-cpuBefore)*1e6/float64(b.N), "redis-cpu-µs/op")
}

// scriptStats returns the number of script calls (EVALSHA and EVAL, and
// Funnel's module's commands) and the microseconds Redis spent in them
// since the last CONFIG RESETSTAT.
func scriptStats(b *testing.B, srv *redistest.Server) (calls int64, usec float64) {
	stats, err := srv.Info("commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, cmd := range append([]string{"cmdstat_evalsha", "cmdstat_eval"}, moduleStats...) {
		// calls=123,usec=456,usec_per_call=3.70,rejected_calls=0,failed_calls=0
		for _, kv := range strings.Split(stats[cmd], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				n, _ := strconv.ParseInt(v, 10, 64)
				calls += n
			case "usec":
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	return calls, usec
}

// moduleStats are the names of Funnel's module's commands in INFO
// commandstats.
var moduleStats = []string{"cmdstat_funnel.gcra", "cmdstat_funnel.takes", "cmdstat_funnel.window", "cmdstat_funnel.conc", "cmdstat_funnel.log"}

// moduleCalls returns the number of calls of Funnel's module's commands
// since the stats were reset.
func moduleCalls(b *testing.B, srv *redistest.Server) int64 {
	stats, err := srv.Info("commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var calls int64
	for _, cmd := range moduleStats {
		if _, v, ok := strings.Cut(stats[cmd], "calls="); ok {
			n, _ := strconv.ParseInt(v[:strings.IndexByte(v, ',')], 10, 64)
			calls += n
		}
	}
	return calls
}

// redisCPU returns the CPU time, user and system, that the redis-server
// process has used, in seconds.
func redisCPU(b *testing.B, srv *redistest.Server) float64 {
	info, err := srv.Info("cpu")
	if err != nil {
		b.Fatal(err)
	}
	user, err1 := strconv.ParseFloat(info["used_cpu_user"], 64)
	sys, err2 := strconv.ParseFloat(info["used_cpu_sys"], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("INFO cpu: %v", info)
	}
	return user + sys
}
