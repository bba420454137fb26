package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
)

// Costs known only afterwards, on one hot key: a charge, a peek of n units,
// and a reserve with its settle (one op of this benchmark is the pair), by
// algorithm, beside a plain take, in memory and on Redis.

var costLimits = func() []struct {
	name  string
	limit funnel.Limit
} {
	window := func(a funnel.Algorithm) funnel.Limit {
		return funnel.Limit{Algorithm: a, Count: 1 << 30, Period: 1000 * time.Second}
	}
	return []struct {
		name  string
		limit funnel.Limit
	}{
		{"gcra", funnel.Per(1<<30, 1000*time.Second)},
		{"fixed_window", window(funnel.FixedWindow)},
		{"sliding_window", window(funnel.SlidingWindow)},
		{"sliding_log", funnel.Limit{Algorithm: funnel.SlidingLog, Count: 1000, Period: time.Millisecond}},
	}
}()

// costCalls are the calls measured; each returns an error only when it
// failed.
var costCalls = []struct {
	name string
	f    func(context.Context, *funnel.Limiter, funnel.Limit) error
}{
	{"allow", func(ctx context.Context, lim *funnel.Limiter, l funnel.Limit) error {
		_, err := lim.AllowN(ctx, "hot", l, 1)
		return err
	}},
	{"charge", func(ctx context.Context, lim *funnel.Limiter, l funnel.Limit) error {
		_, err := lim.Charge(ctx, "hot", l, 1)
		return err
	}},
	{"peek", func(ctx context.Context, lim *funnel.Limiter, l funnel.Limit) error {
		_, err := lim.PeekN(ctx, "hot", l, 1)
		return err
	}},
	{"reserve+settle", func(ctx context.Context, lim *funnel.Limiter, l funnel.Limit) error {
		r, res, err := lim.Reserve(ctx, "hot", l, 2, time.Minute)
		if err != nil {
			return err
		}
		if !res.Allowed {
			return nil
		}
		_, err = lim.Settle(ctx, "hot", r.ID, 1)
		return err
	}},
}

func BenchmarkCosts(b *testing.B) {
	ctx := context.Background()
	for _, l := range costLimits {
		for _, call := range costCalls {
			b.Run(l.name+"/"+call.name, func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				defer s.Close()
				lim := funnel.New(s)
				if err := call.f(ctx, lim, l.limit); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					call.f(ctx, lim, l.limit)
				}
			})
		}
	}
}

// BenchmarkCostsRedis reports, beside ns/op, the script time Redis spent
// per op (commandstats) and Redis's CPU per op.
func BenchmarkCostsRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	for _, l := range costLimits {
		for _, call := range costCalls {
			b.Run(l.name+"/"+call.name, func(b *testing.B) {
				admin := srv.Client()
				if err := admin.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				client := newGoRedis(srv.Addr)
				defer client.Close()
				lim := funnel.New(redisstore.New(client, redisstore.Options{Prefix: "funnel:"}))
				for range 10 { // connections, the script cache
					if err := call.f(ctx, lim, l.limit); errors.Is(err, funnel.ErrNoReserve) {
						b.Skip("the Redis store keeps no reservations")
					} else if err != nil {
						b.Fatal(err)
					}
				}
				if err := admin.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				cpuBefore := redisCPU(b, srv)
				for b.Loop() {
					if err := call.f(ctx, lim, l.limit); err != nil {
						b.Fatal(err)
					}
				}
				cpuAfter := redisCPU(b, srv)
				_, usec := scriptStats(b, srv)
				b.ReportMetric(usec/float64(b.N), "redis-µs/op")
				b.ReportMetric((cpuAfter-cpuBefore)*1e6/float64(b.N), "redis-cpu-µs/op")
			})
		}
	}
}
