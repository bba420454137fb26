package funnel_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/memstore"
)

func TestConstructors(t *testing.T) {
	for _, c := range []struct {
		got, want funnel.Limit
	}{
		{funnel.PerSecond(10), funnel.Limit{Count: 10, Period: time.Second, Burst: 9}},
		{funnel.PerMinute(30), funnel.Limit{Count: 30, Period: time.Minute, Burst: 29}},
		{funnel.PerHour(1), funnel.Limit{Count: 1, Period: time.Hour, Burst: 0}},
		{funnel.PerDay(0), funnel.Limit{Count: 0, Period: 24 * time.Hour, Burst: 0}},
		{funnel.Per(5, 3*time.Second).WithBurst(0), funnel.Limit{Count: 5, Period: 3 * time.Second}},
	} {
		if c.got != c.want {
			t.Errorf("got %+v, want %+v", c.got, c.want)
		}
	}
	if !(funnel.Limit{}).IsZero() || funnel.PerSecond(1).IsZero() {
		t.Error("IsZero")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		l    funnel.Limit
		want error
	}{
		{funnel.PerSecond(10), nil},
		{funnel.Limit{}, gcra.ErrZeroRate},
		{funnel.PerSecond(0), gcra.ErrZeroRate},
		{funnel.PerSecond(10).WithBurst(-1), gcra.ErrNegative},
		{funnel.Per(-10, time.Second), gcra.ErrNegative},
		{funnel.Per(10, -time.Second), gcra.ErrNegative},
		{funnel.PerSecond(2e6), nil}, // T = 500 ns
		{funnel.PerSecond(1e9), nil}, // T = 1 ns
		{funnel.PerSecond(2e9), gcra.ErrZeroRate},
		{funnel.PerSecond(1).WithBurst(math.MaxInt64 / 2), gcra.ErrOverflow},
	} {
		err := c.l.Validate()
		if !errors.Is(err, c.want) || (c.want != nil && !errors.Is(err, funnel.ErrInvalidLimit)) {
			t.Errorf("%v: Validate() = %v, want %v", c.l, err, c.want)
		}
	}
}

func TestLimiterRejectsBadInput(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	lim := funnel.New(s)
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k", funnel.Limit{}); !errors.Is(err, funnel.ErrInvalidLimit) {
		t.Errorf("zero limit: %v", err)
	}
	if _, err := lim.AllowN(ctx, "k", funnel.PerSecond(1), -1); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("negative n: %v", err)
	}
	if _, err := lim.AllowN(ctx, "k", funnel.PerSecond(1), math.MaxInt64); !errors.Is(err, funnel.ErrInvalidQuantity) || !errors.Is(err, gcra.ErrOverflow) {
		t.Errorf("huge n: %v", err)
	}
	// Nothing was charged by the refused calls.
	if r, err := lim.Peek(ctx, "k", funnel.PerSecond(1)); err != nil || r.Remaining != 1 {
		t.Errorf("after bad input: %+v, %v", r, err)
	}
}

func TestLimiterReset(t *testing.T) {
	s := memstore.New(memstore.Options{})
	defer s.Close()
	lim := funnel.New(s)
	ctx := context.Background()
	limit := funnel.PerHour(1)
	if r, _ := lim.Allow(ctx, "k", limit); !r.Allowed {
		t.Fatal("first refused")
	}
	if r, _ := lim.Allow(ctx, "k", limit); r.Allowed {
		t.Fatal("second allowed")
	}
	if existed, err := lim.Reset(ctx, "k"); err != nil || !existed {
		t.Fatal(existed, err)
	}
	if r, _ := lim.Allow(ctx, "k", limit); !r.Allowed {
		t.Fatal("refused after reset")
	}
}

// A quantity whose cost overflows a funnel is ErrInvalidQuantity, alone or
// among several limits.
func TestOverflowIsInvalidQuantity(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.Per(1, time.Hour)
	if _, err := lim.AllowN(ctx, "k", limit, math.MaxInt64/2); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("AllowN: %v", err)
	}
	_, err := lim.AllowAll(ctx, []funnel.Request{{Key: "a", Limit: limit, N: math.MaxInt64 / 2}, {Key: "b", Limit: limit, N: 1}})
	if !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("AllowAll: %v", err)
	}
}

// AllowChecked takes redis-cell's refund idiom for a funnel without a ban,
// and nothing negative for other limits; AllowN takes nothing negative.
func TestAllowCheckedRefund(t *testing.T) {
	s := memstore.New(memstore.Options{Now: func() int64 { return 1_795_350_508_971_038_011 }})
	defer s.Close()
	lim := funnel.New(s)
	ctx := context.Background()
	c, err := funnel.PerMinute(30).WithBurst(15).Check()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		lim.AllowChecked(ctx, "k", &c, 1)
	}
	if r, err := lim.AllowChecked(ctx, "k", &c, -2); err != nil || !r.Allowed || r.Remaining != 15 || r.ResetAfter != 2*time.Second {
		t.Fatalf("refund of 2: %+v, %v", r, err)
	}
	if r, err := lim.AllowChecked(ctx, "k", &c, -5); err != nil || !r.Allowed || r.Remaining != 16 || r.ResetAfter != 0 {
		t.Fatalf("refund past a full bucket: %+v, %v", r, err)
	}
	if _, err := lim.AllowN(ctx, "k", funnel.PerMinute(30), -1); !errors.Is(err, funnel.ErrInvalidQuantity) {
		t.Errorf("AllowN(-1): %v", err)
	}
	banned, _ := funnel.Limit{Count: 1, Period: time.Second, Ban: time.Minute}.Check()
	window, _ := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Second}.Check()
	for _, c := range []funnel.Checked{banned, window} {
		if _, err := lim.AllowChecked(ctx, "x", &c, -1); !errors.Is(err, funnel.ErrInvalidQuantity) {
			t.Errorf("%v, -1: %v", c.Limit, err)
		}
	}
}
