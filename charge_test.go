package funnel_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
)

// Bad charges and peeks of n are errors of the closed set, and change
// nothing.
func TestChargeErrors(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	store := memstore.New(memstore.Options{Now: func() int64 { return now }})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	hourly := funnel.Per(1, time.Hour)
	fixed := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Minute}
	if _, err := lim.Charge(ctx, "g", hourly, 1_000_000); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Charge(ctx, "f", fixed, algo.MaxCount); err != nil {
		t.Fatal(err)
	}
	before := map[string]funnel.Result{}
	for key, l := range map[string]funnel.Limit{"g": hourly, "f": fixed} {
		before[key], _ = lim.Peek(ctx, key, l)
	}
	for _, c := range []struct {
		name string
		do   func() (funnel.Result, error)
		want []error
	}{
		{"negative charge", func() (funnel.Result, error) { return lim.Charge(ctx, "g", hourly, -1) }, []error{funnel.ErrInvalidQuantity, algo.ErrNegative}},
		{"negative peek", func() (funnel.Result, error) { return lim.PeekN(ctx, "g", hourly, -3) }, []error{funnel.ErrInvalidQuantity}},
		{"cost overflow", func() (funnel.Result, error) { return lim.Charge(ctx, "g", hourly, math.MaxInt64) }, []error{funnel.ErrInvalidQuantity, gcra.ErrOverflow}},
		{"TAT overflow", func() (funnel.Result, error) { return lim.Charge(ctx, "g", hourly, 2_000_000) }, []error{funnel.ErrInvalidQuantity, gcra.ErrOverflow}},
		{"peek overflow", func() (funnel.Result, error) { return lim.PeekN(ctx, "g", hourly, math.MaxInt64) }, []error{funnel.ErrInvalidQuantity, gcra.ErrOverflow}},
		{"count overflow", func() (funnel.Result, error) { return lim.Charge(ctx, "f", fixed, 1) }, []error{funnel.ErrInvalidQuantity, algo.ErrOverflow}},
		{"concurrency", func() (funnel.Result, error) {
			return lim.Charge(ctx, "c", funnel.Limit{Algorithm: funnel.Concurrency, Count: 1, Period: time.Second}, 1)
		}, []error{funnel.ErrInvalidLimit}},
		{"invalid limit", func() (funnel.Result, error) { return lim.Charge(ctx, "g", funnel.Limit{}, 1) }, []error{funnel.ErrInvalidLimit}},
	} {
		r, err := c.do()
		for _, want := range c.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", c.name, err, want)
			}
		}
		if r != (funnel.Result{}) || funnel.ClassOf(err) != funnel.ClassInvalid {
			t.Errorf("%s: %+v, class %v", c.name, r, funnel.ClassOf(err))
		}
	}
	for key, l := range map[string]funnel.Limit{"g": hourly, "f": fixed} {
		if r, _ := lim.Peek(ctx, key, l); r != before[key] {
			t.Errorf("%q after the errors: %+v, want %+v", key, r, before[key])
		}
	}
	// Through Limiter.Do, as a server sends checked ops.
	c, _ := hourly.Check()
	res := make([]funnel.Result, 1)
	if err := lim.Do(ctx, []funnel.Op{{Kind: funnel.OpCharge, Key: "g", Limit: c, N: 2_000_000}}, res); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("Do: %v", err)
	}
	cf, _ := fixed.Check()
	if err := lim.Do(ctx, []funnel.Op{{Kind: funnel.OpCharge, Key: "f", Limit: cf, N: 1}}, res); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("Do: %v", err)
	}
}

// A charge that AllowN would admit answers exactly what AllowN answers,
// and leaves the same state; PeekN of 0 is Peek.
func TestChargeWithinIsAllowN(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano()
	store := memstore.New(memstore.Options{Now: func() int64 { return now }})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	for _, l := range []funnel.Limit{
		funnel.PerSecond(10),
		{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4, DelayUnits: funnel.NoDelay},
		{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second},
		{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second},
	} {
		a, b := "a-"+l.String(), "b-"+l.String()
		for _, n := range []int64{2, 0, 3} {
			ra, erra := lim.Charge(ctx, a, l, n)
			rb, errb := lim.AllowN(ctx, b, l, n)
			if erra != nil || errb != nil || ra != rb {
				t.Errorf("%v, %d: Charge %+v, %v; AllowN %+v, %v", l, n, ra, erra, rb, errb)
			}
			pa, _ := lim.PeekN(ctx, a, l, 0)
			pb, _ := lim.Peek(ctx, b, l)
			if pa != pb {
				t.Errorf("%v: PeekN(0) %+v, Peek %+v", l, pa, pb)
			}
		}
	}
}
