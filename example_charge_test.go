package funnel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// A token budget of an LLM API: a request's prompt is known when it
// arrives and is checked against the budget then; the tokens it really
// used are known when its response ends, and are charged then, into debt
// if need be. A key in debt is refused until the debt has drained.
func ExampleLimiter_Charge() {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	store := memstore.New(memstore.Options{Now: func() int64 { return now }})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	tokens := funnel.PerMinute(10_000) // all at once if need be, then 10,000 a minute

	serve := func(prompt, completion int64) {
		res, err := lim.PeekN(ctx, "api-key:7", tokens, prompt)
		if err != nil {
			panic(err)
		}
		if !res.Allowed {
			fmt.Printf("429: retry after %v\n", res.RetryAfter)
			return
		}
		// ... the model answers with completion tokens ...
		res, err = lim.Charge(ctx, "api-key:7", tokens, prompt+completion)
		if err != nil {
			panic(err)
		}
		fmt.Printf("charged %d: within=%v remaining=%d retry=%v\n", prompt+completion, res.Allowed, res.Remaining, res.RetryAfter)
	}
	serve(1_000, 5_000)
	serve(500, 7_000) // 4,000 were left: 3,500 tokens of debt
	serve(200, 100)
	now += int64(30 * time.Second) // 5,000 tokens drain
	serve(200, 100)
	// Output:
	// charged 6000: within=true remaining=4000 retry=0s
	// charged 7500: within=false remaining=0 retry=21s
	// 429: retry after 22.2s
	// charged 300: within=true remaining=1200 retry=0s
}

func ExampleLimiter_PeekN() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.PerSecond(10) // 10 at once, then one every 100ms

	lim.AllowN(ctx, "upload", limit, 8)
	res, _ := lim.PeekN(ctx, "upload", limit, 2)
	fmt.Println(res.Allowed, res.Remaining)
	res, _ = lim.PeekN(ctx, "upload", limit, 5)
	fmt.Println(res.Allowed, res.RetryAfter)
	res, _ = lim.PeekN(ctx, "upload", limit, 11) // more than a full bucket
	fmt.Println(res.Allowed, res.RetryAfter == funnel.Never)
	// Output:
	// true 2
	// false 300ms
	// false true
}

// A daily quota of a fixed window, charged by the size of each export once
// it is known: the day's count goes past the quota, and the key is
// refused until the next day.
func ExampleLimiter_Charge_fixedWindow() {
	store := memstore.New(memstore.Options{Now: fixedClock()}) // noon UTC
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	quota := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1_000, Calendar: funnel.Daily}

	res, _ := lim.Charge(ctx, "export:acme", quota, 800)
	fmt.Println(res.Allowed, res.Remaining)
	res, _ = lim.Charge(ctx, "export:acme", quota, 450)
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	res, _ = lim.Allow(ctx, "export:acme", quota)
	fmt.Println(res.Allowed, res.RetryAfter)
	// Output:
	// true 200
	// false 0 12h0m0s
	// false 12h0m0s
}
