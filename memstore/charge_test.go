package memstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

// Charges and takes of one key from many goroutines lose no unit: charges
// are applied lock-free on a held key, by compare-and-swap, as takes are,
// and the key's TAT ends exactly where one unit per take admitted and
// every charge put it.
func TestConcurrentCharges(t *testing.T) {
	clock := storetest.NewClock(storetest.Day0)
	s := memstore.New(memstore.Options{Now: clock.Now})
	defer s.Close()
	lim := funnel.New(s)
	ctx := context.Background()
	limit := funnel.PerSecond(1000)                       // T = 1ms, tolerance 1s
	if _, err := lim.Allow(ctx, "k", limit); err != nil { // held: the lock-free path
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := int64(1)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				if (g+i)%2 == 0 {
					if _, err := lim.Charge(ctx, "k", limit, 3); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				r, err := lim.Allow(ctx, "k", limit)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	const charged = 8 * 250 * 3
	ttl, ok, err := s.TTL(ctx, "k")
	if want := time.Duration(admitted+charged) * time.Millisecond; err != nil || !ok || ttl != want {
		t.Fatalf("TTL %v, %v, %v; want %v (%d admitted, %d charged)", ttl, ok, err, want, admitted, charged)
	}
}

// BenchmarkCharge is one Limiter call on one hot key, per algorithm: a take
// of one unit (AllowN), a charge of one (Charge) and a peek of one (PeekN),
// under limits that admit every call (the sliding log's: most), on the real
// clock.
func BenchmarkCharge(b *testing.B) {
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		funnel.PerSecond(1e8).WithBurst(1 << 30),
		{Algorithm: funnel.LeakyBucket, Count: 1e8, Period: time.Second, Burst: 1 << 30, DelayUnits: funnel.NoDelay},
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
