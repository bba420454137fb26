package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// BenchmarkCharge is one Limiter call on one hot key, per algorithm: a take
// of one unit (AllowN), a charge of one (Charge) and a peek of one (PeekN),
// under limits that admit every call (the sliding log's: most), on the real
// clock.
func BenchmarkCharge(b *testing.B) {
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		funnel.PerSecond(1e8).WithBurst(1 << 30),
		{Algorithm: funnel.LeakyBucket, Count: 1e8, Period: time.Second, Burst: 1 << 30, Delay: funnel.NoDelay},
		{Algorithm: funnel.FixedWindow, Count: 1 << 40, Period: time.Hour},
		{Algorithm: funnel.SlidingWindow, Count: 1 << 39, Period: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 1000, Period: time.Millisecond},
	} {
		for _, call := range []struct {
			name string
			f    func(*funnel.Limiter, funnel.Limit) (funnel.Result, error)
		}{
			{"allow", func(lim *funnel.Limiter, l funnel.Limit) (funnel.Result, error) { return lim.AllowN(ctx, "hot", l, 1) }},
			{"charge", func(lim *funnel.Limiter, l funnel.Limit) (funnel.Result, error) { return lim.Charge(ctx, "hot", l, 1) }},
			{"peek", func(lim *funnel.Limiter, l funnel.Limit) (funnel.Result, error) { return lim.PeekN(ctx, "hot", l, 1) }},
		} {
			b.Run(l.Algorithm.String()+"/"+call.name, func(b *testing.B) {
				s := memstore.New(memstore.Options{})
				defer s.Close()
				lim := funnel.New(s)
				if _, err := call.f(lim, l); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					call.f(lim, l)
				}
			})
		}
	}
}
