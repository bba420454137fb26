package funnel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

func ExampleLimiter_AllowAll() {
	store := memstore.New(memstore.Options{Now: fixedClock()}) // 12:00 UTC
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	paris, _ := time.LoadLocation("Europe/Paris")
	perSecond := funnel.PerSecond(10).WithBurst(20)
	perDay := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 2, Calendar: funnel.Daily, Location: paris}
	reqs := []funnel.Request{
		{Key: "{user:42}:s", Limit: perSecond, N: 1},
		{Key: "{user:42}:d", Limit: perDay, N: 1},
	}
	for i := 0; i < 3; i++ {
		m, err := lim.AllowAll(ctx, reqs)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v refused=%d retry=%v per-second remaining=%d\n",
			m.Allowed, m.Refused, m.RetryAfter, m.Results[0].Remaining)
	}
	// Output:
	// allowed=true refused=-1 retry=0s per-second remaining=20
	// allowed=true refused=-1 retry=0s per-second remaining=19
	// allowed=false refused=1 retry=11h0m0s per-second remaining=19
}

func ExampleLimiter_Wait() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	// nginx's limit_req zone rate=100r/s burst=3: the first request passes,
	// the next three wait 10, 20 and 30 ms, the fifth is refused.
	limit := funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 100, Period: time.Second, Burst: 3}
	for i := 0; i < 5; i++ {
		res, err := lim.Wait(context.Background(), "upstream", limit, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v waited=%v\n", res.Allowed, res.Delay)
	}
	// Output:
	// allowed=true waited=0s
	// allowed=true waited=10ms
	// allowed=true waited=20ms
	// allowed=true waited=30ms
	// allowed=false waited=0s
}

func ExampleLimiter_Acquire() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Minute}

	a, res, _ := lim.AcquireID(ctx, "exports", limit, "job-1")
	fmt.Println(res.Allowed, a.ID)
	_, res, _ = lim.AcquireID(ctx, "exports", limit, "job-2")
	fmt.Println(res.Allowed, res.RetryAfter) // until job-1's lease expires, unless released
	held, _ := lim.Release(ctx, a)
	fmt.Println(held)
	_, res, _ = lim.AcquireID(ctx, "exports", limit, "job-2")
	fmt.Println(res.Allowed)
	// Output:
	// true job-1
	// false 1m0s
	// true
	// true
}

// A concurrency limit that queues (OpenResty limit.conn): 2 requests at
// once, 3 more told to wait; the wait follows the latencies reported.
func ExampleLimiter_ReleaseAfter() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: time.Minute, Burst: 3, UnitDelay: 100 * time.Millisecond}

	var leases []funnel.Lease
	for i := 1; i <= 6; i++ {
		l, res, _ := lim.AcquireID(ctx, "reports", limit, fmt.Sprint("req-", i))
		fmt.Printf("req-%d allowed=%v delay=%v\n", i, res.Allowed, res.Delay)
		leases = append(leases, l)
	}
	// req-1 took 300ms: the unit delay is now (100ms + 300ms) / 2.
	held, _ := lim.ReleaseAfter(ctx, leases[0], 300*time.Millisecond)
	_, res, _ := lim.AcquireID(ctx, "reports", limit, "req-7")
	fmt.Printf("released=%v req-7 delay=%v\n", held, res.Delay)
	// Output:
	// req-1 allowed=true delay=0s
	// req-2 allowed=true delay=0s
	// req-3 allowed=true delay=100ms
	// req-4 allowed=true delay=100ms
	// req-5 allowed=true delay=200ms
	// req-6 allowed=false delay=0s
	// released=true req-7 delay=400ms
}

func ExampleLimit_ban() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	// Five login attempts a minute; whoever goes over is shut out for an hour.
	limit := funnel.PerMinute(5)
	limit.Ban = time.Hour
	for i := 0; i < 6; i++ {
		res, _ := lim.Allow(ctx, "login:10.0.0.7", limit)
		if !res.Allowed {
			fmt.Println("refused, banned:", res.Banned, "retry after:", res.RetryAfter)
		}
	}
	bans, _ := lim.Bans(ctx)
	fmt.Println(bans[0].Key, bans[0].Until.UTC().Format(time.Kitchen))
	// Output:
	// refused, banned: true retry after: 1h0m0s
	// login:10.0.0.7 1:00PM
}
