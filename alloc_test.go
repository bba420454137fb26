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

// AllowAllInto writes into the caller's buffer, which MultiResult.Results
// then is, and allocates nothing for a known key; a short buffer is an
// error.
func TestAllocsAllowAllInto(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	day := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily}
	reqs := []funnel.Request{{Key: "{u}:s", Limit: funnel.PerSecond(10), N: 1}, {Key: "{u}:d", Limit: day, N: 1}}
	buf := make([]funnel.Result, 3)
	m, err := lim.AllowAllInto(ctx, reqs, buf)
	if err != nil || !m.Allowed || len(m.Results) != 2 || &m.Results[0] != &buf[0] || buf[1].Remaining != 999 || buf[2] != (funnel.Result{}) {
		t.Fatalf("AllowAllInto = %+v, %v; buffer %+v", m, err, buf)
	}
	if _, err := lim.AllowAllInto(ctx, reqs, buf[:1]); err == nil {
		t.Fatal("AllowAllInto with a short buffer: no error")
	}
	if n := testing.AllocsPerRun(100, func() { lim.AllowAllInto(ctx, reqs, buf) }); n != 0 {
		t.Errorf("AllowAllInto allocates %v times per call", n)
	}
}
