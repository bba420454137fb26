package storetest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// Charges (costs known only afterwards, recorded into debt) and peeks of n
// units, on every algorithm that takes them.

func charge(key string, l funnel.Limit, n int64) fop {
	return fop{kind: funnel.OpCharge, key: key, limit: l, n: n}
}

func peekN(key string, l funnel.Limit, n int64) fop {
	return fop{kind: funnel.OpPeek, key: key, limit: l, n: n}
}

var (
	// funnel5 admits 5 at once, then one a second.
	funnel5 = funnel.Limit{Count: 5, Period: 5 * time.Second, Burst: 4}
	// slidingDay is a sliding window counter of a day, whose bound on a
	// window's count is MaxWeight / 86,400,000 ms.
	slidingDay = funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 1000, Period: day}
)

var chargeCases = []famCase{
	{
		name: "ChargeFunnel",
		steps: []famStep{
			// Within the limit: what a take answers.
			{0, ops(charge("g", funnel5, 3)), []funnel.Result{allowed(5, 2, 3*s)}},
			// Into debt: the TAT is 8 s ahead, 3 s past the tolerance.
			{0, ops(charge("g", funnel5, 5)), []funnel.Result{refused(5, 0, 3*s, 8*s)}},
			{0, ops(take("g", funnel5, 1)), []funnel.Result{refused(5, 0, 4*s, 8*s)}},
			{0, ops(take("g", funnel5, 0)), []funnel.Result{refused(5, 0, 3*s, 8*s)}},
			// The debt drains to the exact nanosecond.
			{4*s - 1, ops(take("g", funnel5, 1)), []funnel.Result{refused(5, 0, 1, 4*s+1)}},
			{4 * s, ops(take("g", funnel5, 1)), []funnel.Result{allowed(5, 0, 5*s)}},
			{4 * s, ops(peekN("g", funnel5, 1)), []funnel.Result{refused(5, 0, s, 5*s)}},
			{4 * s, ops(peekN("g", funnel5, 6)), []funnel.Result{refused(5, 0, funnel.Never, 5*s)}},
			{6 * s, ops(peekN("g", funnel5, 2)), []funnel.Result{allowed(5, 2, 3*s)}},
			{9 * s, ops(peekN("g", funnel5, 5)), []funnel.Result{allowed(5, 5, 0)}},
			{9 * s, ops(charge("g", funnel5, 0)), []funnel.Result{allowed(5, 5, 0)}},
			// A charge above the whole limit on a fresh key.
			{9 * s, ops(charge("g2", funnel5, 12)), []funnel.Result{refused(5, 0, 7*s, 12*s)}},
		},
	},
	{
		// A charge is never delayed; a peek of n says the delay of the take.
		name: "ChargeLeakyBucket",
		steps: []famStep{
			{0, ops(charge("b", leaky, 7)), []funnel.Result{refused(5, 0, 200*ms, 700*ms)}},
			{0, ops(take("b", leaky, 1)), []funnel.Result{refused(5, 0, 300*ms, 700*ms)}},
			{300 * ms, ops(peekN("b", leaky, 1)), []funnel.Result{delayed(5, 1, 400*ms, 400*ms)}},
			{300 * ms, ops(peekN("b", leaky, 2)), []funnel.Result{refused(5, 1, 100*ms, 400*ms)}},
			{300 * ms, ops(take("b", leaky, 1)), []funnel.Result{delayed(5, 0, 500*ms, 400*ms)}},
			{300 * ms, ops(charge("b", leaky, 1)), []funnel.Result{refused(5, 0, 100*ms, 600*ms)}},
		},
	},
	{
		// A fixed window's debt ends with the window.
		name: "ChargeFixedWindow",
		steps: []famStep{
			{100 * ms, ops(charge("f", fixed3, 2)), []funnel.Result{allowed(3, 1, 900*ms)}},
			{100 * ms, ops(charge("f", fixed3, 3)), []funnel.Result{refused(3, 0, 900*ms, 900*ms)}},
			{200 * ms, ops(take("f", fixed3, 1)), []funnel.Result{refused(3, 0, 800*ms, 800*ms)}},
			{200 * ms, ops(peekN("f", fixed3, 4)), []funnel.Result{refused(3, 0, funnel.Never, 800*ms)}},
			{s - 1, ops(peekN("f", fixed3, 1)), []funnel.Result{refused(3, 0, 1, 1)}},
			{s, ops(peekN("f", fixed3, 3)), []funnel.Result{allowed(3, 3, 0)}},
			{s, ops(take("f", fixed3, 3)), []funnel.Result{allowed(3, 0, s)}},
		},
	},
	{
		// A sliding window's debt weighs on the next window.
		name: "ChargeSlidingWindow",
		steps: []famStep{
			{0, ops(charge("w", sliding4, 6)), []funnel.Result{refused(4, 0, 1334*ms, 2*s)}},
			// ⌈6·667/1000⌉ = 5 is over 4; ⌈6·666/1000⌉ = 4 is not.
			{1333 * ms, ops(take("w", sliding4, 0)), []funnel.Result{refused(4, 0, ms, 667*ms)}},
			{1334 * ms, ops(take("w", sliding4, 0)), []funnel.Result{allowed(4, 0, 666*ms)}},
			{1334 * ms, ops(peekN("w", sliding4, 1)), []funnel.Result{refused(4, 0, 166*ms, 666*ms)}},
			{1500 * ms, ops(peekN("w", sliding4, 1)), []funnel.Result{allowed(4, 1, 500*ms)}},
			{1500 * ms, ops(take("w", sliding4, 1)), []funnel.Result{allowed(4, 0, 1500*ms)}},
		},
	},
	{
		// A sliding log's debt lasts a period after the charge.
		name: "ChargeSlidingLog",
		steps: []famStep{
			{0, ops(take("l", log3, 1)), []funnel.Result{allowed(3, 2, s)}},
			{100 * ms, ops(charge("l", log3, 3)), []funnel.Result{refused(3, 0, 900*ms, s)}},
			{500 * ms, ops(peekN("l", log3, 1)), []funnel.Result{refused(3, 0, 600*ms, 600*ms)}},
			{s, ops(take("l", log3, 0)), []funnel.Result{allowed(3, 0, 100*ms)}},
			{1100*ms - 1, ops(take("l", log3, 1)), []funnel.Result{refused(3, 0, 1, 1)}},
			{1100 * ms, ops(take("l", log3, 3)), []funnel.Result{allowed(3, 0, s)}},
			// A charge far above the count keeps Count+1 entries.
			{2100 * ms, ops(charge("l", log3, 1000)), []funnel.Result{refused(3, 0, s, s)}},
			{2100 * ms, ops(giveBack("l", log3, 1)), []funnel.Result{allowed(3, 0, s)}},
			{3100 * ms, ops(peekN("l", log3, 3)), []funnel.Result{allowed(3, 3, 0)}},
			// A smaller debt keeps the newest Count+1 entries, older ones
			// among them; a refund gives back from those.
			{5 * s, ops(take("l", log3, 2)), []funnel.Result{allowed(3, 1, s)}},
			{5100 * ms, ops(charge("l", log3, 3)), []funnel.Result{refused(3, 0, 900*ms, s)}},
			{5100 * ms, ops(giveBack("l", log3, 1)), []funnel.Result{allowed(3, 0, s)}},
			{5100 * ms, ops(take("l", log3, 0)), []funnel.Result{allowed(3, 0, s)}},
			{6 * s, ops(take("l", log3, 0)), []funnel.Result{allowed(3, 1, 100*ms)}},
		},
	},
}

func testChargeSteps(t *testing.T, newStore NewStore) {
	for _, tc := range chargeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runFamilySteps(t, newStore, tc)
		})
	}
}

// A charge's key expires when its whole debt has drained, and not before.
func testChargeExpiry(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	for _, c := range []struct {
		f   fop
		ttl time.Duration
	}{
		{charge("x-g", funnel5, 40), 40 * s},
		{charge("x-b", leaky, 100), 10 * s},
		{charge("x-f", fixed3, 30), s},
		{charge("x-w", sliding4, 30), 2 * s},
		{charge("x-l", log3, 30), s},
		// A debt of a century, as long as the state lasts.
		{charge("x-c", funnel.Limit{Count: 1, Period: 100 * 365 * day}, 1), 100 * 365 * day},
	} {
		if _, err := do(t, e, clock, 0, c.f); err != nil {
			t.Fatalf("%s: %v", describe(ops(c.f)), err)
		}
		if d, ok, err := e.TTL(ctx, c.f.key); err != nil || !ok || d != c.ttl {
			t.Errorf("%s: TTL = %v, %v, %v; want %v", describe(ops(c.f)), d, ok, err, c.ttl)
		}
	}
	clock.Set(Day0 + int64(40*s) - 1)
	if _, ok, _ := e.TTL(ctx, "x-g"); !ok {
		t.Errorf("the funnel's debt forgotten 1ns early")
	}
	clock.Set(Day0 + int64(40*s))
	if _, ok, _ := e.TTL(ctx, "x-g"); ok {
		t.Errorf("the funnel's debt still held when drained")
	}
}

// Bad charges and peeks are errors and change nothing.
func testChargeErrors(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	hour1 := funnel.Limit{Count: 1, Period: h} // T = 1 h
	fixedMax := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: day}
	for _, f := range []fop{charge("e-g", hour1, 1_500_000), charge("e-f", fixedMax, algo.MaxCount-1),
		charge("e-w", slidingDay, algo.MaxWeight/int64(day/time.Millisecond)-2), charge("e-l", log3, 1)} {
		if _, err := do(t, e, clock, 0, f); err != nil {
			t.Fatalf("%s: %v", describe(ops(f)), err)
		}
	}
	ttls := map[string]time.Duration{}
	for _, k := range []string{"e-g", "e-f", "e-w", "e-l"} {
		d, ok, err := e.TTL(ctx, k)
		if err != nil || !ok {
			t.Fatalf("TTL(%q) = %v, %v", k, ok, err)
		}
		ttls[k] = d
	}
	for _, c := range []struct {
		f   fop
		err error
	}{
		// Negative quantities.
		{charge("e-g", hour1, -1), funnel.ErrInvalidQuantity},
		{charge("e-f", fixedMax, -1), funnel.ErrInvalidQuantity},
		{charge("e-w", slidingDay, -5), funnel.ErrInvalidQuantity},
		{charge("e-l", log3, math.MinInt64), funnel.ErrInvalidQuantity},
		{peekN("e-g", hour1, -1), funnel.ErrInvalidQuantity},
		// Costs and TATs beyond int64 nanoseconds.
		{charge("e-g", hour1, math.MaxInt64), gcra.ErrOverflow},
		{charge("e-g", hour1, 1_500_000), gcra.ErrOverflow},
		{peekN("e-g", hour1, math.MaxInt64), gcra.ErrOverflow},
		// Counts beyond what a window keeps exactly.
		{charge("e-f", fixedMax, 2), algo.ErrOverflow},
		{charge("e-f", fixedMax, math.MaxInt64), algo.ErrOverflow},
		{charge("e-w", slidingDay, 2), algo.ErrOverflow},
		{charge("e-l", slidingDay, algo.MaxCount+1), algo.ErrOverflow},
		// Leases are neither charged nor peeked by quantity.
		{charge("e-c", conc2, 1), funnel.ErrInvalidLimit},
		{peekN("e-c", conc2, 1), funnel.ErrInvalidLimit},
	} {
		if _, err := do(t, e, clock, s, c.f); !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want %v", describe(ops(c.f)), err, c.err)
		}
	}
	// A charge or a peek of n is alone in its call.
	for _, f := range []fop{charge("e-x", fixed3, 1), peekN("e-x", fixed3, 1)} {
		if _, err := do(t, e, clock, s, take("e-y", fixed3, 1), f); err == nil {
			t.Errorf("%s among other ops: no error", describe(ops(f)))
		}
	}
	clock.Set(Day0)
	for k, want := range ttls {
		if d, ok, err := e.TTL(ctx, k); err != nil || !ok || d != want {
			t.Errorf("TTL(%q) after the errors = %v, %v, %v; want %v", k, d, ok, err, want)
		}
	}
	for _, k := range []string{"e-c", "e-x", "e-y"} {
		if _, ok, err := e.TTL(ctx, k); err != nil || ok {
			t.Errorf("TTL(%q) = %v, %v; want no state", k, ok, err)
		}
	}
}

// Peeks of n units store nothing, and above the limit answer Never.
func testPeekN(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	for _, c := range []struct {
		f    fop
		want funnel.Result
	}{
		{peekN("p-g", funnel5, 5), allowed(5, 5, 0)},
		{peekN("p-g", funnel5, 6), refused(5, 5, funnel.Never, 0)},
		{peekN("p-b", leaky, 6), refused(5, 5, funnel.Never, 0)},
		{peekN("p-f", fixed3, 4), refused(3, 3, funnel.Never, 0)},
		{peekN("p-w", sliding4, 5), refused(4, 4, funnel.Never, 0)},
		{peekN("p-l", log3, 4), refused(3, 3, funnel.Never, 0)},
		{peekN("p-l", log3, 3), allowed(3, 3, 0)},
	} {
		expect(t, e, clock, 0, ops(c.f), c.want)
		if _, ok, err := e.TTL(ctx, c.f.key); err != nil || ok {
			t.Fatalf("%s: TTL reports state (%v, %v)", describe(ops(c.f)), ok, err)
		}
	}
}

// A charge that leaves its key over a limit with a ban starts the ban; a
// charge during a ban is recorded; a peek of n never starts one.
func testChargeBans(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	f := fixed3
	f.Ban = time.Minute
	g := funnel5
	g.Ban = time.Minute
	expect(t, e, clock, 0, ops(peekN("cb-f", f, 4)), refused(3, 3, funnel.Never, 0))
	expect(t, e, clock, 0, ops(charge("cb-f", f, 3)), allowed(3, 0, s))
	expect(t, e, clock, 0, ops(peekN("cb-f", f, 1)), refused(3, 0, s, s))
	if bans, err := e.Bans(ctx); err != nil || len(bans) != 0 {
		t.Fatalf("bans after peeks: %v, %v", bans, err)
	}
	expect(t, e, clock, 100*ms, ops(charge("cb-f", f, 1)), banned(3, time.Minute, 900*ms))
	expect(t, e, clock, 100*ms, ops(peekN("cb-f", f, 1)), banned(3, time.Minute, 900*ms))
	// Recorded during the ban (the count is 6, seen once the ban is lifted).
	expect(t, e, clock, 200*ms, ops(charge("cb-f", f, 2)), banned(3, time.Minute-100*ms, 800*ms))
	if ok, err := e.Unban(ctx, "cb-f"); err != nil || !ok {
		t.Fatalf("Unban: %v, %v", ok, err)
	}
	expect(t, e, clock, 200*ms, ops(take("cb-f", fixed3, 0)), refused(3, 0, 800*ms, 800*ms))
	// The funnel: a charge within the limit starts nothing.
	expect(t, e, clock, 0, ops(charge("cb-g", g, 5)), allowed(5, 0, 5*s))
	expect(t, e, clock, 0, ops(charge("cb-g", g, 1)), banned(5, time.Minute, 6*s))
	if bans, err := e.Bans(ctx); err != nil || len(bans) != 1 || bans[0].Key != "cb-g" {
		t.Fatalf("bans: %v, %v", bans, err)
	}
}
