package memstore_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// A snapshot carries a store's limits over to a new one, as across a
// restart: the key spent before is still refused after.
func ExampleStore_WriteSnapshot() {
	ctx := context.Background()
	limit := funnel.PerMinute(2)
	old := memstore.New(memstore.Options{})
	defer old.Close()
	lim := funnel.New(old)
	lim.AllowN(ctx, "user:42", limit, 2)

	var file bytes.Buffer // a file, in a real program
	if _, err := old.WriteSnapshot(&file); err != nil {
		panic(err)
	}

	restarted := memstore.New(memstore.Options{})
	defer restarted.Close()
	st, err := restarted.ReadSnapshot(&file)
	if err != nil {
		panic(err)
	}
	r, _ := funnel.New(restarted).Allow(ctx, "user:42", limit)
	fmt.Println("keys restored:", st.Keys)
	fmt.Println("allowed:", r.Allowed, "retry within a minute:", r.RetryAfter > 0 && r.RetryAfter <= time.Minute)
	// Output:
	// keys restored: 1
	// allowed: false retry within a minute: true
}
