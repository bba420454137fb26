package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/redisstore"
)

// A limiter whose state lives in Redis, shared by every process that opens
// the same URL. (Not run: it needs a Redis.)
func ExampleOpen() {
	store, err := redisstore.Open("redis://localhost:6379/0", redisstore.Options{
		Prefix: "ratelimit:",
		Fail:   funnel.FailClosed, // refuse requests while Redis is unreachable (the default)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	lim := funnel.New(store)
	res, err := lim.Allow(context.Background(), "user:42", funnel.PerMinute(30).WithBurst(15))
	switch {
	case err != nil:
		log.Print(err)
	case res.Fallback:
		fmt.Println("Redis unavailable: refused by policy")
	case !res.Allowed:
		fmt.Println("retry after", res.RetryAfter)
	}
}
