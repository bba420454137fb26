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

// A Limiter's AllowN remembers the parameters of the first funnel limit it
// decides under: every decision, under that limit and under the others
// (other counts, periods and bursts, in any order, from several
// goroutines), is the one that AllowChecked makes under the checked limit
// on a store of its own; an invalid first limit is refused, and remembered
// by nobody.
func TestAllowNUnderManyLimits(t *testing.T) {
	ctx := context.Background()
	var now int64 = 1_795_350_508_971_038_011
	clock := func() int64 { return now }
	got := funnel.New(memstore.New(memstore.Options{Now: clock, SweepInterval: -1}))
	want := funnel.New(memstore.New(memstore.Options{Now: clock, SweepInterval: -1}))
	if _, err := got.Allow(ctx, "k", funnel.Limit{Count: 0, Period: time.Second}); !errors.Is(err, funnel.ErrInvalidLimit) {
		t.Fatalf("a zero count: %v", err)
	}
	limits := []funnel.Limit{
		funnel.PerSecond(10), funnel.PerMinute(10), funnel.Per(10, time.Second), // one limit twice
		{Count: 10, Period: time.Second, Burst: 0}, {Count: 3, Period: time.Hour, Burst: 7}, funnel.PerSecond(1000),
	}
	checked := make([]funnel.Checked, len(limits))
	for i, l := range limits {
		var err error
		if checked[i], err = l.Check(); err != nil {
			t.Fatal(err)
		}
	}
	for step := range 3000 {
		i := (step * 7) % len(limits)
		if step%5 == 0 {
			i = 0
		}
		key := string(rune('a' + step%3))
		n := int64(step % 4)
		g, gerr := got.AllowN(ctx, key, limits[i], n)
		w, werr := want.AllowChecked(ctx, key, &checked[i], n)
		if g != w || (gerr == nil) != (werr == nil) {
			t.Fatalf("step %d, %+v, n %d: AllowN %+v, %v; AllowChecked %+v, %v", step, limits[i], n, g, gerr, w, werr)
		}
		now += int64(time.Millisecond) * int64(step%13)
	}
	// From several goroutines at once, each limit on its own keys (the
	// race detector watches the remembered parameters).
	done := make(chan error)
	for i := range limits {
		go func() {
			for j := range 200 {
				key := string(rune('A'+i)) + string(rune('0'+j%5))
				if _, err := got.Allow(ctx, key, limits[i]); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range limits {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
