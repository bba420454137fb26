package funnel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// A token budget of an LLM API, reserved and settled: each request
// reserves its max_tokens when it arrives, so that concurrent requests
// cannot together overspend the budget, and settles at the tokens it used
// when its response ends: the unused part of the reservation is given
// back, a response that used more is charged the difference.
func ExampleLimiter_Reserve() {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	store := memstore.New(memstore.Options{Now: func() int64 { return now }})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	tokens := funnel.PerMinute(10_000)

	// Three requests arrive at once, each with max_tokens 4,000.
	var held []funnel.Reservation
	for i := range 3 {
		r, res, err := lim.Reserve(ctx, "api-key:7", tokens, 4_000, time.Minute)
		if err != nil {
			panic(err)
		}
		if !res.Allowed {
			fmt.Printf("request %d: 429, retry after %v\n", i, res.RetryAfter)
			continue
		}
		fmt.Printf("request %d: reserved %d, remaining %d\n", i, r.Estimate, res.Remaining)
		held = append(held, r)
	}
	// The two responses end, using 1,200 and 4,600 tokens.
	for i, used := range []int64{1_200, 4_600} {
		st, err := lim.Settle(ctx, held[i].Key, held[i].ID, used)
		if err != nil {
			panic(err)
		}
		fmt.Printf("settled at %d: remaining %d\n", st.Actual, st.Remaining)
	}
	// A retry of a settle changes nothing.
	st, _ := lim.Settle(ctx, held[0].Key, held[0].ID, 1_200)
	fmt.Println("again:", st.Again)
	_, res, _ := lim.Reserve(ctx, "api-key:7", tokens, 4_000, 0)
	fmt.Println("third request again:", res.Allowed)
	// Output:
	// request 0: reserved 4000, remaining 6000
	// request 1: reserved 4000, remaining 2000
	// request 2: 429, retry after 12s
	// settled at 1200: remaining 4800
	// settled at 4600: remaining 4200
	// again: true
	// third request again: true
}
