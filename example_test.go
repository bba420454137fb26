package funnel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// A fixed clock keeps the examples' output exact; real code leaves
// memstore.Options.Now nil to use the real clock.
func fixedClock() func() int64 {
	t := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	return func() int64 { return t }
}

func ExampleLimiter_Allow() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	limit := funnel.PerMinute(30).WithBurst(2) // 3 at once, then one every 2s

	for i := 0; i < 4; i++ {
		res, err := lim.Allow(context.Background(), "user:42", limit)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry=%v reset=%v\n", res.Allowed, res.Remaining, res.RetryAfter, res.ResetAfter)
	}
	// Output:
	// allowed=true remaining=2 retry=0s reset=2s
	// allowed=true remaining=1 retry=0s reset=4s
	// allowed=true remaining=0 retry=0s reset=6s
	// allowed=false remaining=0 retry=2s reset=6s
}

func ExampleLimiter_AllowN() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	limit := funnel.PerSecond(10) // burst 9: 10 at once

	res, _ := lim.AllowN(context.Background(), "upload", limit, 4)
	fmt.Println(res.Allowed, res.Remaining)
	res, _ = lim.AllowN(context.Background(), "upload", limit, 7)
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)
	res, _ = lim.AllowN(context.Background(), "upload", limit, 11)
	fmt.Println(res.Allowed, res.RetryAfter == funnel.Never)
	// Output:
	// true 6
	// false 6 100ms
	// false true
}

func ExampleLimiter_Peek() {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	limit := funnel.PerHour(100)

	lim.AllowN(context.Background(), "api-key", limit, 25)
	res, _ := lim.Peek(context.Background(), "api-key", limit)
	fmt.Println(res.Remaining, res.ResetAfter)
	// Output: 75 15m0s
}

func ExampleLimit_String() {
	fmt.Println(funnel.PerMinute(30).WithBurst(15))
	fmt.Println(funnel.PerDay(1000))
	// Output:
	// 30 per 1m0s, burst 15
	// 1000 per 24h0m0s, burst 999
}

func ExampleLimit_Validate() {
	err := funnel.Per(10, 5*time.Nanosecond).Validate()
	fmt.Println(errors.Is(err, funnel.ErrInvalidLimit))
	fmt.Println(err)
	// Output:
	// true
	// funnel: invalid limit 10 per 5ns, burst 9: gcra: zero rates are not supported
}
