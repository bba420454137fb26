//go:build !race

// The race detector makes sync.Pool drop items on purpose, so allocations
// are counted without it.

package funnel_test

import (
	"context"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// TestAllocsFamilyAllow: a decision of the family on a held key allocates
// nothing, on the memory store.
func TestAllocsFamilyAllow(t *testing.T) {
	store := memstore.New(memstore.Options{Now: fixedClock()})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1 << 30, Period: time.Minute}
	lim.Allow(ctx, "k", limit)
	if n := testing.AllocsPerRun(1000, func() { lim.Allow(ctx, "k", limit) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}
