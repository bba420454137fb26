// Package storetest is the conformance suite that every funnel.Store runs.
//
// A store's test calls Run with a constructor that builds a fresh store whose
// clock is the given function. The suite drives time itself (no test sleeps),
// so the same cases, at the same instants, run against every store and must
// give the same results to the nanosecond.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/cell"
)

// Epoch is the instant at which the suite's clocks start: a real 19-digit
// nanosecond Unix time, so that stores which keep epochs (Redis) are tested
// with the magnitudes they meet in production.
const Epoch int64 = 1_795_350_508_971_038_011

// NewStore builds a fresh, empty store whose clock is now (nanoseconds since
// the Unix epoch). The store must not share keys with any other store the
// constructor returned; t.Cleanup may be used to release it.
type NewStore func(t *testing.T, now func() int64) funnel.Store

// Clock is a fake clock, safe for concurrent use. Each suite case has its
// own, so cases run in parallel.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock that reads ns.
func NewClock(ns int64) *Clock {
	c := &Clock{}
	c.ns.Store(ns)
	return c
}

// Now returns the clock's time in nanoseconds since the Unix epoch.
func (c *Clock) Now() int64 { return c.ns.Load() }

// Set moves the clock to ns.
func (c *Clock) Set(ns int64) { c.ns.Store(ns) }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// Run runs the conformance suite against stores built by newStore, the
// limiter family's (RunFamily), reservations (RunReserve) when they
// implement funnel.ReserveStore, and Redis's GCRA command's (RunGCRA) when
// they implement funnel.GCRAStore.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Steps", func(t *testing.T) {
		for _, tc := range stepCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				runSteps(t, newStore, tc)
			})
		}
	})
	t.Run("Rejections", func(t *testing.T) { t.Parallel(); testRejections(t, newStore) })
	t.Run("Reset", func(t *testing.T) { t.Parallel(); testReset(t, newStore) })
	t.Run("KeysAreIndependent", func(t *testing.T) { t.Parallel(); testIndependentKeys(t, newStore) })
	t.Run("BinaryKeys", func(t *testing.T) { t.Parallel(); testBinaryKeys(t, newStore) })
	t.Run("ExpiryIsFullBucket", func(t *testing.T) { t.Parallel(); testExpiry(t, newStore) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); testConcurrent(t, newStore) })
	t.Run("RefundState", func(t *testing.T) { t.Parallel(); testRefundState(t, newStore) })
	t.Run("Differential", func(t *testing.T) { t.Parallel(); testDifferential(t, newStore) })
	t.Run("Family", func(t *testing.T) { RunFamily(t, newStore) })
	t.Run("Reserve", func(t *testing.T) { RunReserve(t, newStore) })
	t.Run("GCRACommand", func(t *testing.T) {
		if _, ok := funnel.GCRAOf(newStore(t, NewClock(Epoch).Now)); !ok {
			t.Skip("the store does not run the GCRA command")
		}
		RunGCRA(t, newStore)
	})
}

// step is one request of a case: at offset At from Epoch, Quantity units.
// Want is the exact result; Wire, when set, is CL.THROTTLE's reply as
// spec/cl-throttle.md states it.
type step struct {
	At       time.Duration
	Quantity int64
	Want     funnel.Result
	Wire     []int64
}

type stepCase struct {
	name   string
	params [3]int64 // max_burst, count, period in seconds (CL.THROTTLE's arguments)
	period time.Duration
	steps  []step
}

func (tc stepCase) gcraParams(t *testing.T) gcra.Params {
	t.Helper()
	period := tc.period
	if period == 0 {
		period = time.Duration(tc.params[2]) * time.Second
	}
	p, err := gcra.NewParams(tc.params[0], tc.params[1], period)
	if err != nil {
		t.Fatalf("params %v: %v", tc.params, err)
	}
	return p
}

func allowed(limit, remaining int64, reset time.Duration) funnel.Result {
	return funnel.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func refused(limit, remaining int64, retry, reset time.Duration) funnel.Result {
	return funnel.Result{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const s, ms, us = time.Second, time.Millisecond, time.Microsecond

var stepCases = []stepCase{
	{
		// README of redis-cell: CL.THROTTLE user123 15 30 60 → 0 16 15 -1 2.
		// T = 2 s, tolerance 32 s.
		name: "ReadmeBurstThenRate", params: [3]int64{15, 30, 60},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(16, 15, 2*s), Wire: []int64{0, 16, 15, -1, 2}},
			{At: 0, Quantity: 14, Want: allowed(16, 1, 30*s), Wire: []int64{0, 16, 1, -1, 30}},
			{At: 0, Quantity: 1, Want: allowed(16, 0, 32*s), Wire: []int64{0, 16, 0, -1, 32}},
			{At: 0, Quantity: 1, Want: refused(16, 0, 2*s, 32*s), Wire: []int64{1, 16, 0, 2, 32}},
			// 1 ns before the slot opens: refused, retry under 1 ms shows 0.
			{At: 2*s - 1, Quantity: 1, Want: refused(16, 0, 1, 30*s+1), Wire: []int64{1, 16, 0, 0, 30}},
			// The tie is allowed.
			{At: 2 * s, Quantity: 1, Want: allowed(16, 0, 32*s), Wire: []int64{0, 16, 0, -1, 32}},
			// Half a slot later: refused for the other half.
			{At: 3 * s, Quantity: 1, Want: refused(16, 0, 1*s, 31*s), Wire: []int64{1, 16, 0, 1, 31}},
			// After 10 s, five units have leaked.
			{At: 12 * s, Quantity: 0, Want: allowed(16, 5, 22*s), Wire: []int64{0, 16, 5, -1, 22}},
			{At: 12 * s, Quantity: 5, Want: allowed(16, 0, 32*s), Wire: []int64{0, 16, 0, -1, 32}},
			// After the reset time, a full bucket again.
			{At: 44 * s, Quantity: 0, Want: allowed(16, 16, 0), Wire: []int64{0, 16, 16, -1, 0}},
			{At: 44 * s, Quantity: 1, Want: allowed(16, 15, 2*s), Wire: []int64{0, 16, 15, -1, 2}},
		},
	},
	{
		// Quantity 0 on a fresh key reports remaining = limit and reset 0.
		name: "PeekFreshKey", params: [3]int64{4, 1, 1},
		steps: []step{
			{At: 0, Quantity: 0, Want: allowed(5, 5, 0), Wire: []int64{0, 5, 5, -1, 0}},
			{At: 0, Quantity: 0, Want: allowed(5, 5, 0), Wire: []int64{0, 5, 5, -1, 0}},
			{At: 0, Quantity: 1, Want: allowed(5, 4, s), Wire: []int64{0, 5, 4, -1, 1}},
			// A peek does not move the TAT.
			{At: 500 * ms, Quantity: 0, Want: allowed(5, 4, 500*ms), Wire: []int64{0, 5, 4, -1, 1}},
			{At: 500 * ms, Quantity: 0, Want: allowed(5, 4, 500*ms), Wire: []int64{0, 5, 4, -1, 1}},
		},
	},
	{
		// A quantity above the limit can never pass: retry -1, nothing consumed.
		name: "QuantityAboveLimit", params: [3]int64{4, 1, 1},
		steps: []step{
			{At: 0, Quantity: 6, Want: refused(5, 5, gcra.Never, 0), Wire: []int64{1, 5, 5, -1, 0}},
			{At: 0, Quantity: 2, Want: allowed(5, 3, 2*s), Wire: []int64{0, 5, 3, -1, 2}},
			{At: 0, Quantity: 100, Want: refused(5, 3, gcra.Never, 2*s), Wire: []int64{1, 5, 3, -1, 2}},
			{At: 0, Quantity: 3, Want: allowed(5, 0, 5*s), Wire: []int64{0, 5, 0, -1, 5}},
		},
	},
	{
		// A quantity within the limit but above what is free now waits.
		name: "QuantityWaits", params: [3]int64{4, 1, 1},
		steps: []step{
			{At: 0, Quantity: 4, Want: allowed(5, 1, 4*s), Wire: []int64{0, 5, 1, -1, 4}},
			{At: 0, Quantity: 3, Want: refused(5, 1, 2*s, 4*s), Wire: []int64{1, 5, 1, 2, 4}},
			{At: 1500 * ms, Quantity: 3, Want: refused(5, 2, 500*ms, 2500*ms), Wire: []int64{1, 5, 2, 1, 3}},
			{At: 2 * s, Quantity: 3, Want: allowed(5, 0, 5*s), Wire: []int64{0, 5, 0, -1, 5}},
			// Exactly the limit is possible once the bucket is full again.
			{At: 7 * s, Quantity: 5, Want: allowed(5, 0, 5*s), Wire: []int64{0, 5, 0, -1, 5}},
		},
	},
	{
		// Durations under 1 ms are reported as 0 s: T = 666666 ns.
		name: "FastRate", params: [3]int64{20, 1500, 1},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(21, 20, 666666), Wire: []int64{0, 21, 20, -1, 0}},
			{At: 0, Quantity: 20, Want: allowed(21, 0, 21*666666), Wire: []int64{0, 21, 0, -1, 1}},
			{At: 0, Quantity: 1, Want: refused(21, 0, 666666, 21*666666), Wire: []int64{1, 21, 0, 0, 1}},
			{At: 666666, Quantity: 1, Want: allowed(21, 0, 21*666666), Wire: []int64{0, 21, 0, -1, 1}},
		},
	},
	{
		// On the wire, limited with remaining 1 (redis-cell divides whole
		// microseconds: 1 µs free / 1 µs): T = 1999 ns. Exactly, 0 remain.
		name: "RoundingArtefact", params: [3]int64{0, 500250, 1},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(1, 0, 1999), Wire: []int64{0, 1, 0, -1, 0}},
			{At: 1000, Quantity: 1, Want: refused(1, 0, 999, 999), Wire: []int64{1, 1, 1, 0, 0}},
			{At: 1999, Quantity: 1, Want: allowed(1, 0, 1999), Wire: []int64{0, 1, 0, -1, 0}},
		},
	},
	{
		// Burst 0: one at a time, exactly every T.
		name: "NoBurst", params: [3]int64{0, 1, 60},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(1, 0, 60*s), Wire: []int64{0, 1, 0, -1, 60}},
			{At: 59*s + 999*ms, Quantity: 1, Want: refused(1, 0, ms, ms), Wire: []int64{1, 1, 0, 1, 1}},
			{At: 59*s + 999*ms + 999*us, Quantity: 1, Want: refused(1, 0, us, us), Wire: []int64{1, 1, 0, 0, 0}},
			{At: 60 * s, Quantity: 1, Want: allowed(1, 0, 60*s), Wire: []int64{0, 1, 0, -1, 60}},
			// Arrivals a nanosecond apart around the boundary.
			{At: 120*s - 1, Quantity: 1, Want: refused(1, 0, 1, 1), Wire: []int64{1, 1, 0, 0, 0}},
			{At: 120 * s, Quantity: 1, Want: allowed(1, 0, 60*s), Wire: []int64{0, 1, 0, -1, 60}},
			{At: 120*s + 1, Quantity: 1, Want: refused(1, 0, 60*s-1, 60*s-1), Wire: []int64{1, 1, 0, 60, 60}},
		},
	},
	{
		// Seconds rounding on the wire: 2.000 s → 2, 2.001 s → 3.
		name: "WireRounding", params: [3]int64{0, 1, 3},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(1, 0, 3*s), Wire: []int64{0, 1, 0, -1, 3}},
			{At: 1 * s, Quantity: 1, Want: refused(1, 0, 2*s, 2*s), Wire: []int64{1, 1, 0, 2, 2}},
			{At: 999 * ms, Quantity: 1, Want: refused(1, 0, 2001*ms, 2001*ms), Wire: []int64{1, 1, 0, 3, 3}},
			{At: 999*ms + 500*us, Quantity: 1, Want: refused(1, 0, 2000500*us, 2000500*us), Wire: []int64{1, 1, 0, 2, 2}},
		},
	},
	{
		// A long period: one per 222 years fits (T near the int64 limit is
		// refused as overflow instead, see Rejections). 1 ns under 7e9 s is
		// 7e9 s as a float64, and its 999 ms add one.
		name: "LongPeriod", params: [3]int64{0, 1, 7_000_000_000},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(1, 0, 7_000_000_000*s), Wire: []int64{0, 1, 0, -1, 7_000_000_000}},
			{At: 1, Quantity: 1, Want: refused(1, 0, 7_000_000_000*s-1, 7_000_000_000*s-1), Wire: []int64{1, 1, 0, 7_000_000_001, 7_000_000_001}},
		},
	},
	{
		// redis-cell's refund idiom: a negative quantity gives units back.
		// While the TAT stays at or after now the reply is redis-cell's;
		// past an empty bucket Funnel stops at a full bucket (redis-cell
		// writes a TAT in the past and answers an error). T = 2 s.
		name: "Refund", params: [3]int64{15, 30, 60},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(16, 15, 2*s), Wire: []int64{0, 16, 15, -1, 2}},
			{At: 0, Quantity: 1, Want: allowed(16, 14, 4*s), Wire: []int64{0, 16, 14, -1, 4}},
			{At: 0, Quantity: 1, Want: allowed(16, 13, 6*s), Wire: []int64{0, 16, 13, -1, 6}},
			{At: 0, Quantity: -2, Want: allowed(16, 15, 2*s), Wire: []int64{0, 16, 15, -1, 2}},
			{At: 0, Quantity: -5, Want: allowed(16, 16, 0), Wire: []int64{0, 16, 16, -1, 0}},
			{At: 0, Quantity: -1, Want: allowed(16, 16, 0), Wire: []int64{0, 16, 16, -1, 0}},
			{At: 0, Quantity: 0, Want: allowed(16, 16, 0), Wire: []int64{0, 16, 16, -1, 0}},
			// The whole burst, then a refund a second later.
			{At: 10 * s, Quantity: 16, Want: allowed(16, 0, 32*s), Wire: []int64{0, 16, 0, -1, 32}},
			{At: 11 * s, Quantity: -1, Want: allowed(16, 1, 29*s), Wire: []int64{0, 16, 1, -1, 29}},
			{At: 11 * s, Quantity: 2, Want: refused(16, 1, 1*s, 29*s), Wire: []int64{1, 16, 1, 1, 29}},
			// A refund that lands exactly on now: a full bucket.
			{At: 40 * s, Quantity: -1, Want: allowed(16, 16, 0), Wire: []int64{0, 16, 16, -1, 0}},
		},
	},
	{
		// A refund on a fresh key with T = 1.5 ms: redis-cell leaves a key
		// that never expires and shows 7 of 6; Funnel a full bucket.
		name: "RefundFreshKey", params: [3]int64{5, 2000, 3},
		steps: []step{
			{At: 0, Quantity: -1, Want: allowed(6, 6, 0), Wire: []int64{0, 6, 6, -1, 0}},
			{At: 0, Quantity: 1, Want: allowed(6, 5, 1500*us), Wire: []int64{0, 6, 5, -1, 1}},
		},
	},
	{
		// From 2^24 s on, redis-cell rounds seconds through a float64: a
		// duration just under a whole second rounds up first (T =
		// 3443016333333333 ns, 21·T = 72303342.999999993 s).
		name: "LongPeriodFloatRounding", params: [3]int64{20, 3, 10329049},
		steps: []step{
			{At: 0, Quantity: 21, Want: allowed(21, 0, 72303342999999993), Wire: []int64{0, 21, 0, -1, 72303344}},
			{At: 0, Quantity: 1, Want: refused(21, 0, 3443016333333333, 72303342999999993), Wire: []int64{1, 21, 0, 3443017, 72303344}},
		},
	},
	{
		// T = 410210633333333312 ns: 3·T = 1230631899.999999936 s → 1230631901.
		name: "LongPeriodFloatRounding2", params: [3]int64{2, 3, 1230631900},
		steps: []step{
			{At: 0, Quantity: 3, Want: allowed(3, 0, 1230631899999999936), Wire: []int64{0, 3, 0, -1, 1230631901}},
		},
	},
	{
		// An emission interval of 100 ns (ten million per second): exact,
		// with remaining in nanoseconds (redis-cell divides by zero µs).
		name: "SubMicrosecondInterval", params: [3]int64{5, 10_000_000, 1},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(6, 5, 100), Wire: []int64{0, 6, 5, -1, 0}},
			{At: 0, Quantity: 5, Want: allowed(6, 0, 600), Wire: []int64{0, 6, 0, -1, 0}},
			{At: 0, Quantity: 1, Want: refused(6, 0, 100, 600), Wire: []int64{1, 6, 0, 0, 0}},
			{At: 99, Quantity: 1, Want: refused(6, 0, 1, 501), Wire: []int64{1, 6, 0, 0, 0}},
			{At: 100, Quantity: 1, Want: allowed(6, 0, 600), Wire: []int64{0, 6, 0, -1, 0}},
			{At: 350, Quantity: 0, Want: allowed(6, 2, 350), Wire: []int64{0, 6, 2, -1, 0}},
			{At: 350, Quantity: -2, Want: allowed(6, 4, 150), Wire: []int64{0, 6, 4, -1, 0}},
			{At: 700, Quantity: 0, Want: allowed(6, 6, 0), Wire: []int64{0, 6, 6, -1, 0}},
		},
	},
	{
		name: "SubMicrosecondLargeBurst", params: [3]int64{100_000, 10_000_000, 1},
		steps: []step{
			{At: 0, Quantity: 1, Want: allowed(100_001, 100_000, 100), Wire: []int64{0, 100_001, 100_000, -1, 0}},
			{At: 0, Quantity: 100_000, Want: allowed(100_001, 0, 10_000_100), Wire: []int64{0, 100_001, 0, -1, 1}},
		},
	},
	{
		// The shortest interval: 1 ns (a billion per second).
		name: "OneNanosecondInterval", params: [3]int64{2, 1_000_000_000, 1},
		steps: []step{
			{At: 0, Quantity: 3, Want: allowed(3, 0, 3), Wire: []int64{0, 3, 0, -1, 0}},
			{At: 0, Quantity: 1, Want: refused(3, 0, 1, 3), Wire: []int64{1, 3, 0, 0, 0}},
			{At: 1, Quantity: 1, Want: allowed(3, 0, 3), Wire: []int64{0, 3, 0, -1, 0}},
			{At: 3, Quantity: 0, Want: allowed(3, 2, 1), Wire: []int64{0, 3, 2, -1, 0}},
			{At: 10, Quantity: 0, Want: allowed(3, 3, 0), Wire: []int64{0, 3, 3, -1, 0}},
		},
	},
	{
		// A period given in nanoseconds, not whole seconds (library only):
		// 7 per 10 ms with burst 2, T = 1428571 ns.
		name: "SubSecondPeriod", params: [3]int64{2, 7}, period: 10 * ms,
		steps: []step{
			{At: 0, Quantity: 3, Want: allowed(3, 0, 3*1428571)},
			{At: 1428570, Quantity: 1, Want: refused(3, 0, 1, 3*1428571-1428570)},
			{At: 1428571, Quantity: 1, Want: allowed(3, 0, 3*1428571)},
		},
	},
}

func runSteps(t *testing.T, newStore NewStore, tc stepCase) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	p := tc.gcraParams(t)
	ctx := context.Background()
	for i, sp := range tc.steps {
		clock.Set(Epoch + int64(sp.At))
		got, err := Throttle(ctx, st, "key:"+tc.name, p, sp.Quantity)
		if err != nil {
			t.Fatalf("step %d (at %v, quantity %d): %v", i, sp.At, sp.Quantity, err)
		}
		if got != sp.Want {
			t.Fatalf("step %d (at %v, quantity %d):\n got %+v\nwant %+v", i, sp.At, sp.Quantity, got, sp.Want)
		}
		if sp.Wire != nil {
			if w := cell.Reply(p, got); fmt.Sprint(w[:]) != fmt.Sprint(sp.Wire) {
				t.Fatalf("step %d (at %v, quantity %d): wire reply %v, want %v", i, sp.At, sp.Quantity, w, sp.Wire)
			}
		}
	}
}

func mustParams(t *testing.T, burst, count int64, period time.Duration) gcra.Params {
	t.Helper()
	p, err := gcra.NewParams(burst, count, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testRejections(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 4, 1, time.Second)
	if _, err := Throttle(ctx, st, "k", p, 2); err != nil {
		t.Fatal(err)
	}
	before, err := Throttle(ctx, st, "k", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	huge := mustParams(t, 1, 1, 4e18) // tolerance 8e18 ns: the new TAT passes 2^63
	for _, c := range []struct {
		name string
		key  string
		p    gcra.Params
		q    int64
		want error
	}{
		{"QuantityCostOverflows", "k", p, math.MaxInt64 / 100_000_000, gcra.ErrOverflow},
		{"RefundCostOverflows", "k", p, -math.MaxInt64 / 100_000_000, gcra.ErrOverflow},
		{"MinInt64Quantity", "k", p, math.MinInt64, gcra.ErrOverflow},
		{"TATOverflows", "fresh", huge, 2, gcra.ErrOverflow},
	} {
		if _, err := Throttle(ctx, st, c.key, c.p, c.q); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	after, err := Throttle(ctx, st, "k", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("state changed by refused inputs: before %+v, after %+v", before, after)
	}
	if r, err := Throttle(ctx, st, "fresh", p, 0); err != nil || r != allowed(5, 5, 0) {
		t.Fatalf("key written by a refused input: %+v, %v", r, err)
	}
}

func testReset(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 2, 1, time.Minute)
	if r, err := Throttle(ctx, st, "r", p, 3); err != nil || !r.Allowed {
		t.Fatalf("spend all: %+v, %v", r, err)
	}
	if r, _ := Throttle(ctx, st, "r", p, 1); r.Allowed {
		t.Fatalf("empty bucket allowed a request: %+v", r)
	}
	if ttl, ok, err := st.TTL(ctx, "r"); err != nil || !ok || ttl != 3*time.Minute {
		t.Fatalf("TTL = %v, %v, %v; want 3m0s, true", ttl, ok, err)
	}
	if existed, err := st.Reset(ctx, "r"); err != nil || !existed {
		t.Fatalf("Reset = %v, %v; want true", existed, err)
	}
	if existed, err := st.Reset(ctx, "r"); err != nil || existed {
		t.Fatalf("second Reset = %v, %v; want false", existed, err)
	}
	if existed, err := st.Reset(ctx, "never-seen"); err != nil || existed {
		t.Fatalf("reset of an absent key: %v, %v", existed, err)
	}
	if ttl, ok, err := st.TTL(ctx, "r"); err != nil || ok || ttl != 0 {
		t.Fatalf("TTL after reset = %v, %v, %v; want 0, false", ttl, ok, err)
	}
	r, err := Throttle(ctx, st, "r", p, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := allowed(3, 3, 0); r != want {
		t.Fatalf("after reset: %+v, want %+v", r, want)
	}
}

func testIndependentKeys(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 0, 1, time.Hour)
	for _, k := range []string{"a", "b", "a:b", "A", ""} {
		r, err := Throttle(ctx, st, k, p, 1)
		if err != nil || !r.Allowed {
			t.Fatalf("key %q: first request %+v, %v", k, r, err)
		}
	}
	if r, _ := Throttle(ctx, st, "a", p, 1); r.Allowed {
		t.Fatal("second request on key a allowed")
	}
}

func testBinaryKeys(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 0, 1, time.Hour)
	keys := []string{"\x00", "\x00\x01", "\xff\xfe", "caf\xc3", "line\r\nbreak", string(make([]byte, 1024))}
	for _, k := range keys {
		if r, err := Throttle(ctx, st, k, p, 1); err != nil || !r.Allowed {
			t.Fatalf("key %q: %+v, %v", k, r, err)
		}
	}
	for _, k := range keys {
		if r, err := Throttle(ctx, st, k, p, 1); err != nil || r.Allowed {
			t.Fatalf("key %q again: %+v, %v", k, r, err)
		}
	}
}

func testExpiry(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	p := mustParams(t, 9, 10, time.Second) // T = 100 ms, tolerance 1 s
	if r, err := Throttle(ctx, st, "e", p, 7); err != nil || r.ResetAfter != 700*ms {
		t.Fatalf("%+v, %v", r, err)
	}
	clock.Add(700*ms - 1)
	if r, _ := Throttle(ctx, st, "e", p, 0); r.ResetAfter != 1 || r.Remaining != 9 {
		t.Fatalf("1 ns before reset: %+v", r)
	}
	if ttl, ok, err := st.TTL(ctx, "e"); err != nil || !ok || ttl != 1 {
		t.Fatalf("TTL 1 ns before reset = %v, %v, %v", ttl, ok, err)
	}
	clock.Add(1)
	if ttl, ok, err := st.TTL(ctx, "e"); err != nil || ok || ttl != 0 {
		t.Fatalf("TTL at reset = %v, %v, %v; want 0, false", ttl, ok, err)
	}
	if existed, err := st.Reset(ctx, "e"); err != nil || existed {
		t.Fatalf("Reset of a full bucket = %v, %v; want false", existed, err)
	}
	if r, _ := Throttle(ctx, st, "e", p, 0); r != allowed(10, 10, 0) {
		t.Fatalf("at reset: %+v", r)
	}
	clock.Add(time.Hour)
	if r, _ := Throttle(ctx, st, "e", p, 10); r != allowed(10, 0, time.Second) {
		t.Fatalf("long after reset: %+v", r)
	}
}

// testConcurrent hammers one key from 8 goroutines at each of a series of
// instants; the store must admit exactly limit + elapsed/T.
func testConcurrent(t *testing.T, newStore NewStore) {
	clock := NewClock(Epoch)
	st := newStore(t, clock.Now)
	ctx := context.Background()
	const (
		workers = 8
		perStep = 40
		steps   = 25
		stepLen = 250 * ms
	)
	p := mustParams(t, 4, 10, time.Second) // T = 100 ms, limit 5
	var admitted atomic.Int64
	var errs atomic.Int64
	for i := 0; i < steps; i++ {
		clock.Set(Epoch + int64(i)*int64(stepLen))
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < perStep; j++ {
					r, err := Throttle(ctx, st, "hot", p, 1)
					if err != nil {
						errs.Add(1)
					} else if r.Allowed {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
	}
	if errs.Load() != 0 {
		t.Fatalf("%d errors", errs.Load())
	}
	span := int64(steps-1) * int64(stepLen)
	want := p.Limit + span/p.Interval
	if got := admitted.Load(); got != want {
		t.Fatalf("admitted %d over %v, want exactly %d", got, time.Duration(span), want)
	}
}

// Throttle is one funnel decision through st.Do: quantity units of key
// under the funnel p (a negative quantity gives units back), as a Limiter
// makes it for a funnel without a ban. The suite's cases are written with
// it; a store's own tests may use it too.
func Throttle(ctx context.Context, st funnel.Store, key string, p gcra.Params, quantity int64) (funnel.Result, error) {
	var res [1]funnel.Result
	op := funnel.Op{Kind: funnel.OpTake, Key: key, N: quantity,
		Limit: funnel.Checked{Limit: funnel.Limit{Burst: p.Burst}, GCRA: p}}
	err := st.Do(ctx, []funnel.Op{op}, res[:])
	return res[0], err
}
