package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	_ "time/tzdata" // the calendar cases name time zones

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
)

// Day0 is the instant from which the family cases count: the first UTC
// midnight after Epoch, 2026-11-23, a Monday. Windows aligned to the Unix
// epoch (of a second, a minute, a day) start there, so the expected
// durations read plainly.
const Day0 int64 = 1_795_392_000_000_000_000

// RunFamily runs the limiter family's cases (every algorithm, refunds,
// leases, bans, several limits at once, WRONGTYPE, calendar windows) against
// stores built by newStore, which must implement funnel.Store. Run calls
// it for such stores.
//
// Keys of one call share a {hash tag}, so that the cases also run on Redis
// Cluster. Time is only ever the injected clock.
func RunFamily(t *testing.T, newStore NewStore) {
	t.Run("Steps", func(t *testing.T) {
		for _, tc := range familyCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				runFamilySteps(t, newStore, tc)
			})
		}
	})
	for _, c := range []struct {
		name string
		f    func(*testing.T, NewStore)
	}{
		{"FunnelStateIsShared", testSharedTAT},
		{"PeeksStoreNothing", testFamilyPeeks},
		{"NegativeQuantity", testFamilyNegative},
		{"TTLAndReset", testFamilyTTL},
		{"Bans", testBans},
		{"BanOutlastedByLimit", testBanOutlasted},
		{"UnbanAndReset", testUnban},
		{"AllOrNothing", testAllOrNothing},
		{"AllOrNothingBans", testAllOrNothingBans},
		{"AllOrNothingErrors", testAllOrNothingErrors},
		{"WrongType", testWrongType},
		{"Calendar", testCalendar},
		{"ClockSteppedBack", testClockSteppedBack},
		{"ConcurrentMultiLimit", testConcurrentMulti},
		{"ConcurrentLeases", testConcurrentLeases},
		{"ConcurrencyQueue", testConcurrencyQueue},
		{"Charges", testChargeSteps},
		{"ChargeExpiry", testChargeExpiry},
		{"ChargeErrors", testChargeErrors},
		{"ChargeBans", testChargeBans},
		{"PeekN", testPeekN},
	} {
		t.Run(c.name, func(t *testing.T) { t.Parallel(); c.f(t, newStore) })
	}
}

// newExecutor builds a store whose clock reads Day0, for the family's cases.
func newExecutor(t *testing.T, newStore NewStore) (funnel.Store, *Clock) {
	t.Helper()
	clock := NewClock(Day0)
	return newStore(t, clock.Now), clock
}

// fop is one op of a case: a Limit, checked when the case runs.
type fop struct {
	kind  funnel.OpKind
	key   string
	limit funnel.Limit
	n     int64
	lease string
	// latency is the latency a release reports.
	latency time.Duration
}

func take(key string, l funnel.Limit, n int64) fop {
	return fop{kind: funnel.OpTake, key: key, limit: l, n: n}
}

func giveBack(key string, l funnel.Limit, n int64) fop {
	return fop{kind: funnel.OpRefund, key: key, limit: l, n: n}
}

func acquire(key string, l funnel.Limit, id string) fop {
	return fop{kind: funnel.OpTake, key: key, limit: l, n: 1, lease: id}
}

// release is a release as Limiter.Release sends it: the limit carries only
// its algorithm.
func release(key, id string) fop {
	return fop{kind: funnel.OpRefund, key: key, limit: funnel.Limit{Algorithm: funnel.Concurrency}, lease: id}
}

// releaseAfter is a release that reports the latency of its request.
func releaseAfter(key, id string, latency time.Duration) fop {
	f := release(key, id)
	f.latency = latency
	return f
}

// op checks f's limit and returns the Op. The limit of a release may carry
// only its algorithm, as Limiter.Release sends it.
func (f fop) op(t *testing.T) funnel.Op {
	t.Helper()
	c, err := f.limit.Check()
	if err != nil {
		if f.kind != funnel.OpRefund || f.limit != (funnel.Limit{Algorithm: funnel.Concurrency}) {
			t.Fatalf("limit %v: %v", f.limit, err)
		}
		c = funnel.Checked{Limit: f.limit}
	}
	return funnel.Op{Kind: f.kind, Key: f.key, Limit: c, N: f.n, Lease: f.lease, Latency: f.latency}
}

// do runs the ops as one Do call at Day0+at and returns the results.
func do(t *testing.T, e funnel.Store, clock *Clock, at time.Duration, fops ...fop) ([]funnel.Result, error) {
	t.Helper()
	clock.Set(Day0 + int64(at))
	ops := make([]funnel.Op, len(fops))
	for i, f := range fops {
		ops[i] = f.op(t)
	}
	res := make([]funnel.Result, len(ops))
	err := e.Do(context.Background(), ops, res)
	return res, err
}

// expect runs the ops at Day0+at and fails unless the results are want.
func expect(t *testing.T, e funnel.Store, clock *Clock, at time.Duration, fops []fop, want ...funnel.Result) {
	t.Helper()
	got, err := do(t, e, clock, at, fops...)
	if err != nil {
		t.Fatalf("at %v, %s: %v", at, describe(fops), err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("at %v, %s: result %d\n got %+v\nwant %+v", at, describe(fops), i, got[i], want[i])
		}
	}
}

// expectErr runs the ops at Day0+at and fails unless the error wraps want.
func expectErr(t *testing.T, e funnel.Store, clock *Clock, at time.Duration, fops []fop, want error) {
	t.Helper()
	if _, err := do(t, e, clock, at, fops...); !errors.Is(err, want) {
		t.Fatalf("at %v, %s: err = %v, want %v", at, describe(fops), err, want)
	}
}

func ops(f ...fop) []fop { return f }

func describe(fops []fop) string {
	s := ""
	for i, f := range fops {
		if i > 0 {
			s += "; "
		}
		verb := [...]string{funnel.OpTake: "take", funnel.OpRefund: "refund", funnel.OpCharge: "charge", funnel.OpPeek: "peek"}[f.kind]
		s += fmt.Sprintf("%s %d of %q under %v", verb, f.n, f.key, f.limit)
		if f.lease != "" {
			s += fmt.Sprintf(" lease %q", f.lease)
		}
		if f.latency != 0 {
			s += fmt.Sprintf(" latency %v", f.latency)
		}
	}
	return s
}

// Results of the family cases.

func delayed(limit, remaining int64, reset, delay time.Duration) funnel.Result {
	return funnel.Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset, Delay: delay}
}

func banned(limit int64, retry, reset time.Duration) funnel.Result {
	return funnel.Result{Limit: limit, RetryAfter: retry, ResetAfter: reset, Banned: true}
}

// famStep is one Do call of a family case, at Day0+at.
type famStep struct {
	at   time.Duration
	ops  []fop
	want []funnel.Result
}

type famCase struct {
	name  string
	steps []famStep
}

const (
	h   = time.Hour
	day = 24 * time.Hour
)

var (
	fixed3   = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Period: time.Second}
	sliding4 = funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 4, Period: time.Second}
	log3     = funnel.Limit{Algorithm: funnel.SlidingLog, Count: 3, Period: time.Second}
	leaky    = funnel.Limit{Algorithm: funnel.LeakyBucket, Count: 10, Period: time.Second, Burst: 4}
	conc2    = funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: 10 * time.Second}
)

func withDelay(l funnel.Limit, d int64) funnel.Limit {
	l.DelayUnits = d
	return l
}

var familyCases = []famCase{
	{
		// 3 per aligned second.
		name: "FixedWindow",
		steps: []famStep{
			{100 * ms, ops(take("f", fixed3, 1)), []funnel.Result{allowed(3, 2, 900*ms)}},
			// The window ends at the second, to the nanosecond.
			{100*ms + 7, ops(take("f", fixed3, 2)), []funnel.Result{allowed(3, 0, 900*ms-7)}},
			{500 * ms, ops(take("f", fixed3, 1)), []funnel.Result{refused(3, 0, 500*ms, 500*ms)}},
			{500 * ms, ops(take("f", fixed3, 0)), []funnel.Result{allowed(3, 0, 500*ms)}},
			{500 * ms, ops(take("f", fixed3, 4)), []funnel.Result{refused(3, 0, funnel.Never, 500*ms)}},
			{s - 1, ops(take("f", fixed3, 1)), []funnel.Result{refused(3, 0, 1, 1)}},
			{s, ops(take("f", fixed3, 1)), []funnel.Result{allowed(3, 2, s)}},
			// A refund never goes below an empty window.
			{1200 * ms, ops(giveBack("f", fixed3, 5)), []funnel.Result{allowed(3, 3, 0)}},
			{1200 * ms, ops(take("f", fixed3, 3)), []funnel.Result{allowed(3, 0, 800*ms)}},
			{1200 * ms, ops(giveBack("f", fixed3, 1)), []funnel.Result{allowed(3, 1, 800*ms)}},
			{1200 * ms, ops(take("f", fixed3, 2)), []funnel.Result{refused(3, 1, 800*ms, 800*ms)}},
			{2 * s, ops(take("f", fixed3, 0)), []funnel.Result{allowed(3, 3, 0)}},
			// Above the count on a fresh key: never, and nothing stored.
			{2 * s, ops(take("f2", fixed3, 4)), []funnel.Result{refused(3, 3, funnel.Never, 0)}},
			{2 * s, ops(take("f2", fixed3, 3)), []funnel.Result{allowed(3, 0, s)}},
		},
	},
	{
		// 4 per second, the previous second's units weighted by overlap
		// (rounded up).
		name: "SlidingWindow",
		steps: []famStep{
			{0, ops(take("w", sliding4, 4)), []funnel.Result{allowed(4, 0, 2*s)}},
			// Next window, 250 ms in: 4·750/1000 = 3 still count.
			{500 * ms, ops(take("w", sliding4, 1)), []funnel.Result{refused(4, 0, 750*ms, 1500*ms)}},
			{1250*ms - 1, ops(take("w", sliding4, 1)), []funnel.Result{refused(4, 0, 1, 750*ms+1)}},
			{1250 * ms, ops(take("w", sliding4, 1)), []funnel.Result{allowed(4, 0, 1750*ms)}},
			{1500 * ms, ops(take("w", sliding4, 0)), []funnel.Result{allowed(4, 1, 1500*ms)}},
			{1500 * ms, ops(take("w", sliding4, 2)), []funnel.Result{refused(4, 1, 250*ms, 1500*ms)}},
			{1750 * ms, ops(take("w", sliding4, 2)), []funnel.Result{allowed(4, 0, 1250*ms)}},
			{1750 * ms, ops(take("w", sliding4, 5)), []funnel.Result{refused(4, 0, funnel.Never, 1250*ms)}},
			// Refunds come from the current window only: ⌈4·200/1000⌉ = 1 stays.
			{1800 * ms, ops(giveBack("w", sliding4, 1)), []funnel.Result{allowed(4, 1, 1200*ms)}},
			{1800 * ms, ops(giveBack("w", sliding4, 9)), []funnel.Result{allowed(4, 3, 200*ms)}},
			{3500 * ms, ops(take("w", sliding4, 0)), []funnel.Result{allowed(4, 4, 0)}},
		},
	},
	{
		// 3 in any second, exactly: a unit is logged at the millisecond at or
		// after its instant.
		name: "SlidingLog",
		steps: []famStep{
			{0, ops(take("l", log3, 1)), []funnel.Result{allowed(3, 2, s)}},
			{200*ms + 5, ops(take("l", log3, 2)), []funnel.Result{allowed(3, 0, 1001*ms-5)}},
			{500 * ms, ops(take("l", log3, 1)), []funnel.Result{refused(3, 0, 500*ms, 701*ms)}},
			{s - 1, ops(take("l", log3, 1)), []funnel.Result{refused(3, 0, 1, 201*ms+1)}},
			{s, ops(take("l", log3, 1)), []funnel.Result{allowed(3, 0, s)}},
			// Two must wait for both units logged at 201 ms.
			{s, ops(take("l", log3, 2)), []funnel.Result{refused(3, 0, 201*ms, s)}},
			{s, ops(take("l", log3, 4)), []funnel.Result{refused(3, 0, funnel.Never, s)}},
			// A refund drops the newest units.
			{1100 * ms, ops(giveBack("l", log3, 2)), []funnel.Result{allowed(3, 2, 101*ms)}},
			{1201 * ms, ops(take("l", log3, 0)), []funnel.Result{allowed(3, 3, 0)}},
			{1201 * ms, ops(giveBack("l", log3, 1)), []funnel.Result{allowed(3, 3, 0)}},
		},
	},
	{
		// nginx's limit_req rate=10r/s burst=4: T = 100 ms, admitted requests
		// queue one T apart.
		name: "LeakyBucket",
		steps: []famStep{
			{0, ops(take("b", leaky, 1)), []funnel.Result{delayed(5, 4, 100*ms, 0)}},
			{0, ops(take("b", leaky, 1)), []funnel.Result{delayed(5, 3, 200*ms, 100*ms)}},
			{0, ops(take("b", leaky, 2)), []funnel.Result{delayed(5, 1, 400*ms, 200*ms)}},
			{0, ops(take("b", leaky, 1)), []funnel.Result{delayed(5, 0, 500*ms, 400*ms)}},
			{0, ops(take("b", leaky, 1)), []funnel.Result{refused(5, 0, 100*ms, 500*ms)}},
			{50 * ms, ops(take("b", leaky, 1)), []funnel.Result{refused(5, 0, 50*ms, 450*ms)}},
			{50 * ms, ops(take("b", leaky, 6)), []funnel.Result{refused(5, 0, funnel.Never, 450*ms)}},
			{100 * ms, ops(take("b", leaky, 1)), []funnel.Result{delayed(5, 0, 500*ms, 400*ms)}},
			{100 * ms, ops(take("b", leaky, 0)), []funnel.Result{allowed(5, 0, 500*ms)}},
			{100 * ms, ops(giveBack("b", leaky, 2)), []funnel.Result{allowed(5, 2, 300*ms)}},
			{100 * ms, ops(giveBack("b", leaky, 20)), []funnel.Result{allowed(5, 5, 0)}},
			// delay=2: the first two excess units pass at once.
			{s, ops(take("d", withDelay(leaky, 2), 1)), []funnel.Result{delayed(5, 4, 100*ms, 0)}},
			{s, ops(take("d", withDelay(leaky, 2), 1)), []funnel.Result{delayed(5, 3, 200*ms, 0)}},
			{s, ops(take("d", withDelay(leaky, 2), 1)), []funnel.Result{delayed(5, 2, 300*ms, 0)}},
			{s, ops(take("d", withDelay(leaky, 2), 1)), []funnel.Result{delayed(5, 1, 400*ms, 100*ms)}},
			{s + 50*ms, ops(take("d", withDelay(leaky, 2), 1)), []funnel.Result{delayed(5, 0, 450*ms, 150*ms)}},
			// nodelay: the whole burst passes at once.
			{s, ops(take("n", withDelay(leaky, funnel.NoDelay), 4)), []funnel.Result{delayed(5, 1, 400*ms, 0)}},
			{s, ops(take("n", withDelay(leaky, funnel.NoDelay), 1)), []funnel.Result{delayed(5, 0, 500*ms, 0)}},
			{s, ops(take("n", withDelay(leaky, funnel.NoDelay), 1)), []funnel.Result{refused(5, 0, 100*ms, 500*ms)}},
		},
	},
	{
		// limit.conn with 2 leases of 10 s.
		name: "Concurrency",
		steps: []famStep{
			{0, ops(acquire("c", conc2, "a")), []funnel.Result{allowed(2, 1, 10*s)}},
			{s, ops(acquire("c", conc2, "b")), []funnel.Result{allowed(2, 0, 10*s)}},
			// Full: room when the first lease expires.
			{2 * s, ops(acquire("c", conc2, "c")), []funnel.Result{refused(2, 0, 8*s, 9*s)}},
			{2 * s, ops(fop{kind: funnel.OpTake, key: "c", limit: conc2}), []funnel.Result{allowed(2, 0, 9*s)}},
			// Acquiring a held id renews it, even when full.
			{3 * s, ops(acquire("c", conc2, "a")), []funnel.Result{allowed(2, 0, 10*s)}},
			{3 * s, ops(release("c", "b")), []funnel.Result{{Allowed: true, ResetAfter: 10 * s}}},
			{3 * s, ops(release("c", "b")), []funnel.Result{{ResetAfter: 10 * s}}},
			{4 * s, ops(acquire("c", conc2, "c")), []funnel.Result{allowed(2, 0, 10*s)}},
			// A lease expires exactly at its millisecond.
			{13*s - 1, ops(acquire("c", conc2, "e")), []funnel.Result{refused(2, 0, 1, s+1)}},
			{13 * s, ops(acquire("c", conc2, "e")), []funnel.Result{allowed(2, 0, 10*s)}},
			{13 * s, ops(fop{kind: funnel.OpTake, key: "c", limit: conc2, n: 2, lease: "f"}), []funnel.Result{refused(2, 0, funnel.Never, 10*s)}},
			// A release under the whole limit also reports what is left.
			{13 * s, ops(fop{kind: funnel.OpRefund, key: "c", limit: conc2, lease: "c"}), []funnel.Result{{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 10 * s}}},
			{23 * s, ops(fop{kind: funnel.OpTake, key: "c", limit: conc2}), []funnel.Result{allowed(2, 2, 0)}},
			{23 * s, ops(release("c", "e")), []funnel.Result{{}}},
		},
	},
}

func runFamilySteps(t *testing.T, newStore NewStore, tc famCase) {
	e, clock := newExecutor(t, newStore)
	for _, sp := range tc.steps {
		expect(t, e, clock, sp.at, sp.ops, sp.want...)
	}
}

// The funnel and the leaky bucket share one state, the TAT, with Throttle.
func testSharedTAT(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	funnel10 := funnel.Limit{Count: 10, Period: time.Second, Burst: 4}
	if r, err := Throttle(ctx, e, "t", mustParams(t, 4, 10, time.Second), 2); err != nil || r != allowed(5, 3, 200*ms) {
		t.Fatalf("Throttle: %+v, %v", r, err)
	}
	expect(t, e, clock, 0, ops(take("t", funnel10, 1)), allowed(5, 2, 300*ms))
	expect(t, e, clock, 0, ops(take("t", leaky, 1)), delayed(5, 1, 400*ms, 300*ms))
	if ttl, ok, err := e.TTL(ctx, "t"); err != nil || !ok || ttl != 400*ms {
		t.Fatalf("TTL = %v, %v, %v; want 400ms", ttl, ok, err)
	}
	// A limit with a ban takes the same state.
	withBan := funnel10
	withBan.Ban = time.Minute
	expect(t, e, clock, 0, ops(take("t", withBan, 1)), allowed(5, 0, 500*ms))
	if r, err := Throttle(ctx, e, "t", mustParams(t, 4, 10, time.Second), 1); err != nil || r != refused(5, 0, 100*ms, 500*ms) {
		t.Fatalf("Throttle after Do: %+v, %v", r, err)
	}
	expect(t, e, clock, 0, ops(giveBack("t", funnel10, 1)), allowed(5, 1, 400*ms))
	expect(t, e, clock, 0, ops(giveBack("t", leaky, 10)), allowed(5, 5, 0))
	if _, ok, err := e.TTL(ctx, "t"); err != nil || ok {
		t.Fatalf("TTL after refunding everything = %v, %v; want no state", ok, err)
	}
}

// Peeks, refusals of fresh keys and refunds of absent keys store nothing.
func testFamilyPeeks(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	for i, f := range []fop{
		take("p0", fixed3, 0), take("p1", sliding4, 0), take("p2", log3, 0), take("p3", leaky, 0),
		{kind: funnel.OpTake, key: "p4", limit: conc2},
		take("p5", fixed3, 4), take("p6", sliding4, 5), take("p7", log3, 4), take("p8", leaky, 6),
		giveBack("p9", fixed3, 1), giveBack("p10", sliding4, 1), giveBack("p11", log3, 1), giveBack("p12", leaky, 1),
		release("p13", "x"),
	} {
		if _, err := do(t, e, clock, 0, f); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if _, ok, err := e.TTL(ctx, f.key); err != nil || ok {
			t.Fatalf("%s: TTL reports state (%v, %v)", describe(ops(f)), ok, err)
		}
	}
	// A full key stays as it is after a peek.
	expect(t, e, clock, 0, ops(take("full", log3, 3)), allowed(3, 0, s))
	expect(t, e, clock, 0, ops(take("full", log3, 0)), allowed(3, 0, s))
	expect(t, e, clock, 0, ops(take("full", log3, 1)), refused(3, 0, s, s))
}

// A negative quantity is an error and changes nothing.
func testFamilyNegative(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	for _, l := range []funnel.Limit{fixed3, sliding4, log3, leaky} {
		key := "neg:" + l.Algorithm.String()
		if r, err := do(t, e, clock, 0, take(key, l, 1)); err != nil || !r[0].Allowed {
			t.Fatalf("%v: %+v, %v", l, r, err)
		}
		before, err := do(t, e, clock, 0, take(key, l, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := do(t, e, clock, 0, take(key, l, -1)); err == nil {
			t.Fatalf("%v: take of -1 accepted", l)
		}
		if _, err := do(t, e, clock, 0, giveBack(key, l, -1)); err == nil {
			t.Fatalf("%v: refund of -1 accepted", l)
		}
		expect(t, e, clock, 0, ops(take(key, l, 0)), before[0])
	}
}

// ttlIs fails unless key's TTL at the clock's time is want (ok false when
// want is 0).
func ttlIs(t *testing.T, e funnel.Store, key string, want time.Duration) {
	t.Helper()
	got, ok, err := e.TTL(context.Background(), key)
	if err != nil || ok != (want != 0) || got != want {
		t.Fatalf("TTL of %q = %v, %v, %v; want %v", key, got, ok, err, want)
	}
}

// resetIs resets key and fails unless it reports want.
func resetIs(t *testing.T, e funnel.Store, key string, want bool) {
	t.Helper()
	if existed, err := e.Reset(context.Background(), key); err != nil || existed != want {
		t.Fatalf("Reset of %q = %v, %v; want %v", key, existed, err, want)
	}
}

// TTL is the time until a key holds no state, for every algorithm; Reset
// forgets the state of every algorithm.
func testFamilyTTL(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	expect(t, e, clock, 100*ms, ops(take("tf", fixed3, 1)), allowed(3, 2, 900*ms))
	expect(t, e, clock, 100*ms, ops(take("tw", sliding4, 1)), allowed(4, 3, 1900*ms))
	expect(t, e, clock, 100*ms, ops(take("tl", log3, 1)), allowed(3, 2, s))
	expect(t, e, clock, 100*ms, ops(acquire("tc", conc2, "a")), allowed(2, 1, 10*s))
	ttlIs(t, e, "tf", 900*ms)
	ttlIs(t, e, "tw", 1900*ms)
	ttlIs(t, e, "tl", s)
	ttlIs(t, e, "tc", 10*s)
	clock.Set(Day0 + int64(s) - 1)
	ttlIs(t, e, "tf", 1)
	ttlIs(t, e, "tw", s+1)
	ttlIs(t, e, "tl", 100*ms+1)
	ttlIs(t, e, "tc", 9100*ms+1)
	clock.Set(Day0 + int64(s))
	ttlIs(t, e, "tf", 0)
	resetIs(t, e, "tf", false) // empty: as absent
	resetIs(t, e, "tl", true)
	resetIs(t, e, "tl", false)
	ttlIs(t, e, "tl", 0)
	expect(t, e, clock, s, ops(take("tl", log3, 3)), allowed(3, 0, s))
	resetIs(t, e, "tc", true)
	expect(t, e, clock, s, ops(acquire("tc", conc2, "b")), allowed(2, 1, 10*s))
	expect(t, e, clock, s, ops(release("tc", "a")), funnel.Result{ResetAfter: 10 * s})
	resetIs(t, e, "tw", true)
	expect(t, e, clock, s, ops(take("tw", sliding4, 0)), allowed(4, 4, 0))
	clock.Set(Day0 + int64(11*s))
	ttlIs(t, e, "tc", 0)
	ttlIs(t, e, "tl", 0)
}

// wantBans fails unless the bans listed at Day0+at are want: key → the end
// of its ban, from Day0.
func wantBans(t *testing.T, e funnel.Store, clock *Clock, at time.Duration, want map[string]time.Duration) {
	t.Helper()
	clock.Set(Day0 + int64(at))
	got, err := e.Bans(context.Background())
	if err != nil {
		t.Fatalf("Bans at %v: %v", at, err)
	}
	ok := len(got) == len(want)
	for _, b := range got {
		until, listed := want[b.Key]
		ok = ok && listed && b.Until.UnixNano() == Day0+int64(until)
	}
	if !ok {
		t.Fatalf("Bans at %v = %v, want (from Day0) %v", at, got, want)
	}
}

// unbanIs unbans key and fails unless it reports want.
func unbanIs(t *testing.T, e funnel.Store, key string, want bool) {
	t.Helper()
	if was, err := e.Unban(context.Background(), key); err != nil || was != want {
		t.Fatalf("Unban of %q = %v, %v; want %v", key, was, err, want)
	}
}

var fixedBan = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 2, Period: time.Second, Ban: 10 * time.Second}

func testBans(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	expect(t, e, clock, 0, ops(take("bad", fixedBan, 2)), allowed(2, 0, s))
	// The refusal starts the ban: RetryAfter is the ban, longer than the
	// window's 900 ms.
	expect(t, e, clock, 100*ms, ops(take("bad", fixedBan, 1)), banned(2, 10*s, 900*ms))
	wantBans(t, e, clock, 100*ms, map[string]time.Duration{"bad": 10100 * ms})
	// In a new window the limit alone would admit: the ban refuses all the
	// same, peeks included, under any limit with a ban.
	expect(t, e, clock, 2*s, ops(take("bad", fixedBan, 1)), banned(2, 8100*ms, 0))
	expect(t, e, clock, 2*s, ops(take("bad", fixedBan, 0)), banned(2, 8100*ms, 0))
	other := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second, Ban: time.Second}
	expect(t, e, clock, 2*s, ops(take("bad", other, 1)), banned(100, 8100*ms, 0))
	// Refusals during the ban do not extend it.
	expect(t, e, clock, 10100*ms-1, ops(take("bad", fixedBan, 1)), banned(2, 1, 0))
	expect(t, e, clock, 10100*ms, ops(take("bad", fixedBan, 1)), allowed(2, 1, 900*ms))
	wantBans(t, e, clock, 10100*ms, map[string]time.Duration{})
	unbanIs(t, e, "bad", false) // ended

	// Limits without a ban, and Throttle, do not look for bans.
	expect(t, e, clock, 20*s, ops(take("bad2", fixedBan, 2)), allowed(2, 0, s))
	expect(t, e, clock, 20*s, ops(take("bad2", fixedBan, 1)), banned(2, 10*s, s))
	free := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Second}
	expect(t, e, clock, 20*s, ops(take("bad2", free, 1)), allowed(100, 97, s))
	g := funnel.Limit{Count: 1, Period: time.Second, Ban: 5 * time.Second}
	expect(t, e, clock, 20*s, ops(take("bad3", g, 1)), allowed(1, 0, s))
	expect(t, e, clock, 20*s, ops(take("bad3", g, 1)), banned(1, 5*s, s))
	expect(t, e, clock, 23*s, ops(take("bad3", g, 1)), banned(1, 2*s, 0))
	if r, err := Throttle(ctx, e, "bad3", mustParams(t, 0, 1, time.Second), 1); err != nil || r != allowed(1, 0, s) {
		t.Fatalf("Throttle of a banned key: %+v, %v", r, err)
	}
	g.Ban = 0
	expect(t, e, clock, 23*s, ops(take("bad3", g, 1)), refused(1, 0, s, s))

	// Asking for more than the limit starts a ban; a peek never does.
	expect(t, e, clock, 23*s, ops(take("big", fixedBan, 3)), banned(2, funnel.Never, 0))
	expect(t, e, clock, 23*s, ops(take("full", fixedBan, 2)), allowed(2, 0, s))
	expect(t, e, clock, 23*s, ops(take("full", fixedBan, 0)), allowed(2, 0, s))
	wantBans(t, e, clock, 23*s, map[string]time.Duration{"bad2": 30 * s, "bad3": 25 * s, "big": 33 * s})
	wantBans(t, e, clock, 30*s, map[string]time.Duration{"big": 33 * s})
}

// A ban shorter than the limit's own wait reports the wait, and a refusal
// after the ban starts a new one.
func testBanOutlasted(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	hourly := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Hour, Ban: time.Second}
	expect(t, e, clock, 0, ops(take("q", hourly, 1)), allowed(1, 0, h))
	expect(t, e, clock, 0, ops(take("q", hourly, 1)), banned(1, h, h))
	expect(t, e, clock, 500*ms, ops(take("q", hourly, 1)), banned(1, h-500*ms, h-500*ms))
	wantBans(t, e, clock, 500*ms, map[string]time.Duration{"q": s})
	expect(t, e, clock, 2*s, ops(take("q", hourly, 1)), banned(1, h-2*s, h-2*s))
	wantBans(t, e, clock, 2*s, map[string]time.Duration{"q": 3 * s})
}

// Unban lifts a ban; Reset forgets the state but not the ban.
func testUnban(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	expect(t, e, clock, 0, ops(take("u", fixedBan, 2)), allowed(2, 0, s))
	expect(t, e, clock, 100*ms, ops(take("u", fixedBan, 1)), banned(2, 10*s, 900*ms))
	unbanIs(t, e, "u", true)
	unbanIs(t, e, "u", false)
	unbanIs(t, e, "never", false)
	wantBans(t, e, clock, 100*ms, map[string]time.Duration{})
	expect(t, e, clock, 100*ms, ops(take("u", fixedBan, 0)), allowed(2, 0, 900*ms))
	expect(t, e, clock, 200*ms, ops(take("u", fixedBan, 1)), banned(2, 10*s, 800*ms))
	resetIs(t, e, "u", true)
	expect(t, e, clock, 300*ms, ops(take("u", fixedBan, 1)), banned(2, 9900*ms, 0))
	wantBans(t, e, clock, 300*ms, map[string]time.Duration{"u": 10200 * ms})
	expect(t, e, clock, 10200*ms, ops(take("u", fixedBan, 1)), allowed(2, 1, 800*ms))
	unbanIs(t, e, "u", false)
}

var (
	// perSecond is 10 per second with a burst of 20: T = 100 ms, 21 at once.
	perSecond = funnel.Limit{Count: 10, Period: time.Second, Burst: 20}
	// perDay is 30 per calendar day in UTC.
	perDay = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 30, Calendar: funnel.Daily}
)

// Several limits at once: all charged, or none.
func testAllOrNothing(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	both := func(n int64) []fop { return ops(take("{u1}:s", perSecond, n), take("{u1}:d", perDay, n)) }
	expect(t, e, clock, 0, both(21), allowed(21, 0, 2100*ms), allowed(30, 9, day))
	// The per-second limit refuses: the day is not charged, and reports its
	// state as it stays.
	expect(t, e, clock, 0, both(1), refused(21, 0, 100*ms, 2100*ms), allowed(30, 9, day))
	expect(t, e, clock, 0, ops(take("{u1}:d", perDay, 0)), allowed(30, 9, day))
	// The day refuses: the per-second limit is not charged.
	expect(t, e, clock, 2100*ms, both(10), allowed(21, 21, 0), refused(30, 9, day-2100*ms, day-2100*ms))
	expect(t, e, clock, 2100*ms, ops(take("{u1}:s", perSecond, 0)), allowed(21, 21, 0))
	expect(t, e, clock, 2100*ms, both(9), allowed(21, 12, 900*ms), allowed(30, 0, day-2100*ms))
	expect(t, e, clock, 2100*ms, both(13), refused(21, 12, 100*ms, 900*ms), refused(30, 0, day-2100*ms, day-2100*ms))
	expect(t, e, clock, 2100*ms, both(0), allowed(21, 12, 900*ms), allowed(30, 0, day-2100*ms))

	// Every algorithm in one call.
	mix := func(id string) []fop {
		return ops(take("{m}:g", perSecond, 1), take("{m}:b", leaky, 1), take("{m}:f", fixed3, 1),
			take("{m}:w", sliding4, 1), take("{m}:l", log3, 1), acquire("{m}:c", conc2, id))
	}
	expect(t, e, clock, 0, mix("x"), allowed(21, 20, 100*ms), allowed(5, 4, 100*ms), allowed(3, 2, s),
		allowed(4, 3, 2*s), allowed(3, 2, s), allowed(2, 1, 10*s))
	expect(t, e, clock, 0, ops(take("{m}:l", log3, 2)), allowed(3, 0, s))
	expect(t, e, clock, 0, mix("y"), allowed(21, 20, 100*ms), allowed(5, 4, 100*ms), allowed(3, 2, s),
		allowed(4, 3, 2*s), refused(3, 0, s, s), allowed(2, 1, 10*s))
	expect(t, e, clock, 0, ops(release("{m}:c", "y")), funnel.Result{ResetAfter: 10 * s})
	expect(t, e, clock, 0, ops(release("{m}:c", "x")), funnel.Result{Allowed: true})
}

// A refusal in a call of several limits starts the bans of the refusing
// limits only.
func testAllOrNothingBans(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	dayBan := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Calendar: funnel.Daily, Ban: time.Hour}
	pair := ops(take("{u2}:s", perSecond, 1), take("{u2}:d", dayBan, 1))
	expect(t, e, clock, 0, pair, allowed(21, 20, 100*ms), allowed(1, 0, day))
	expect(t, e, clock, s, pair, allowed(21, 21, 0), banned(1, day-s, day-s))
	wantBans(t, e, clock, s, map[string]time.Duration{"{u2}:d": s + h})
	expect(t, e, clock, 2*s, pair, allowed(21, 21, 0), banned(1, day-2*s, day-2*s))
	expect(t, e, clock, 2*s, ops(take("{u2}:s", perSecond, 1)), allowed(21, 20, 100*ms))

	// Admitted alone, under a limit with a ban, in a refused call: no ban.
	secBan := perSecond
	secBan.Ban = time.Hour
	one := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1, Period: time.Minute}
	pair = ops(take("{u3}:s", secBan, 1), take("{u3}:m", one, 1))
	expect(t, e, clock, 0, pair, allowed(21, 20, 100*ms), allowed(1, 0, time.Minute))
	expect(t, e, clock, 0, pair, allowed(21, 20, 100*ms), refused(1, 0, time.Minute, time.Minute))
	wantBans(t, e, clock, 2*s, map[string]time.Duration{"{u2}:d": s + h})
}

// A call with an error changes nothing.
func testAllOrNothingErrors(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	expect(t, e, clock, 0, ops(take("{e}:f", fixed3, 1)), allowed(3, 2, s))
	expectErr(t, e, clock, 0, ops(take("{e}:g", perSecond, 1), take("{e}:f", sliding4, 1)), funnel.ErrWrongType)
	expectErr(t, e, clock, 0, ops(take("{e}:g", perSecond, 1), take("{e}:f", fixed3, 1), take("{e}:g", perSecond, 1)), funnel.ErrDuplicateKey)
	if _, err := do(t, e, clock, 0, take("{e}:g", perSecond, 1), take("{e}:f", fixed3, -1)); err == nil {
		t.Fatal("a call with a negative quantity was accepted")
	}
	ttlIs(t, e, "{e}:g", 0)
	// A funnel takes units back (a negative N) only alone in its call.
	expect(t, e, clock, 0, ops(take("{e}:n", perSecond, 5)), allowed(21, 16, 500*ms))
	expectErr(t, e, clock, 0, ops(take("{e}:n", perSecond, -2), take("{e}:f", fixed3, 1)), funnel.ErrInvalidQuantity)
	expectErr(t, e, clock, 0, ops(take("{e}:f", fixed3, 1), take("{e}:n", perSecond, -2)), funnel.ErrInvalidQuantity)
	ttlIs(t, e, "{e}:n", 500*ms)
	expect(t, e, clock, 0, ops(take("{e}:f", fixed3, 0)), allowed(3, 2, s))
}

// A key holds one algorithm's state at a time (the funnel and the leaky
// bucket share theirs); any other is ErrWrongType, until the state is empty.
func testWrongType(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ctx := context.Background()
	limits := []funnel.Limit{
		{Count: 10, Period: time.Second, Burst: 9},
		{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Second},
		{Algorithm: funnel.SlidingWindow, Count: 10, Period: time.Second},
		{Algorithm: funnel.SlidingLog, Count: 10, Period: time.Second},
		{Algorithm: funnel.Concurrency, Count: 10, Period: 10 * time.Second},
	}
	takeOne := func(key string, l funnel.Limit) fop {
		if l.Algorithm == funnel.Concurrency {
			return acquire(key, l, "x")
		}
		return take(key, l, 1)
	}
	giveOne := func(key string, l funnel.Limit) fop {
		if l.Algorithm == funnel.Concurrency {
			return release(key, "x")
		}
		return giveBack(key, l, 1)
	}
	for i, held := range limits {
		for j, other := range limits {
			if i == j {
				continue
			}
			key := fmt.Sprintf("wt:%v:%v", held.Algorithm, other.Algorithm)
			if r, err := do(t, e, clock, 0, takeOne(key, held)); err != nil || !r[0].Allowed {
				t.Fatalf("%s: %+v, %v", key, r, err)
			}
			before, err := do(t, e, clock, 0, take(key, held, 0))
			if err != nil {
				t.Fatal(err)
			}
			expectErr(t, e, clock, 0, ops(takeOne(key, other)), funnel.ErrWrongType)
			expectErr(t, e, clock, 0, ops(take(key, other, 0)), funnel.ErrWrongType)
			expectErr(t, e, clock, 0, ops(giveOne(key, other)), funnel.ErrWrongType)
			if j == 0 {
				if _, err := Throttle(ctx, e, key, mustParams(t, 9, 10, time.Second), 1); !errors.Is(err, funnel.ErrWrongType) {
					t.Fatalf("Throttle of %s: err = %v, want %v", key, err, funnel.ErrWrongType)
				}
			}
			expect(t, e, clock, 0, ops(take(key, held, 0)), before...)
			// Once the state is empty, the key is free for any algorithm.
			if r, err := do(t, e, clock, 11*s, takeOne(key, other)); err != nil || !r[0].Allowed {
				t.Fatalf("%s after the state emptied: %+v, %v", key, r, err)
			}
			expectErr(t, e, clock, 11*s, ops(takeOne(key, held)), funnel.ErrWrongType)
		}
	}
}

// Calendar windows follow the time zone, daylight saving included.
func testCalendar(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	ny, paris := zone("America/New_York"), zone("Europe/Paris")
	daily := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Calendar: funnel.Daily, Location: ny}
	// Day0 is 19:00 on Sunday in New York (EST, UTC−5): the day ends in 5 h.
	expect(t, e, clock, 0, ops(take("cal:d", daily, 5)), allowed(5, 0, 5*h))
	expect(t, e, clock, 0, ops(take("cal:d", daily, 1)), refused(5, 0, 5*h, 5*h))
	expect(t, e, clock, 5*h-1, ops(take("cal:d", daily, 1)), refused(5, 0, 1, 1))
	expect(t, e, clock, 5*h, ops(take("cal:d", daily, 1)), allowed(5, 4, day))
	// 2026-03-08 lasts 23 hours in New York (clocks spring forward at 2:00).
	at := func(t time.Time) time.Duration { return time.Duration(t.UnixNano() - Day0) }
	expect(t, e, clock, at(time.Date(2026, 3, 8, 1, 30, 0, 0, ny)), ops(take("cal:dst", daily, 1)), allowed(5, 4, 21*h+30*time.Minute))
	expect(t, e, clock, at(time.Date(2026, 3, 8, 12, 0, 0, 0, ny)), ops(take("cal:dst", daily, 1)), allowed(5, 3, 12*h))
	// Weeks start on Monday; Day0 is a Monday in UTC.
	weekly := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 2, Calendar: funnel.Weekly}
	expect(t, e, clock, 3*day+h, ops(take("cal:w", weekly, 2)), allowed(2, 0, 95*h))
	expect(t, e, clock, 7*day-1, ops(take("cal:w", weekly, 1)), refused(2, 0, 1, 1))
	expect(t, e, clock, 7*day, ops(take("cal:w", weekly, 1)), allowed(2, 1, 7*day))
	// Day0 is 01:00 on November 23 in Paris: the month ends in 7 days 23 h.
	monthly := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Calendar: funnel.Monthly, Location: paris}
	expect(t, e, clock, 0, ops(take("cal:m", monthly, 1)), allowed(100, 99, 191*h))
	expect(t, e, clock, 191*h-1, ops(take("cal:m", monthly, 1)), allowed(100, 98, 1))
	expect(t, e, clock, 191*h, ops(take("cal:m", monthly, 1)), allowed(100, 99, 31*day))
}

// A clock stepped back (the store's, or a snapshot from the future) never
// grants a fresh window: a later window's units count as the current
// window's, for epoch, calendar (in any zone) and sliding windows alike.
func testClockSteppedBack(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	hourly := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: time.Hour}
	daily := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Calendar: funnel.Daily, Location: ny}
	sliding := funnel.Limit{Algorithm: funnel.SlidingWindow, Count: 5, Period: time.Hour}
	// Day0 is a whole hour; in New York it is 19:00, 5 h before midnight.
	expect(t, e, clock, 2*h, ops(take("back:h", hourly, 5)), allowed(5, 0, h))
	expect(t, e, clock, h+30*time.Minute, ops(take("back:h", hourly, 1)), refused(5, 0, 30*time.Minute, 30*time.Minute))
	expect(t, e, clock, 6*h, ops(take("back:d", daily, 4)), allowed(5, 1, day-h))
	expect(t, e, clock, 4*h, ops(take("back:d", daily, 1)), allowed(5, 0, h))
	expect(t, e, clock, 4*h, ops(take("back:d", daily, 1)), refused(5, 0, h, h))
	expect(t, e, clock, 2*h+10*time.Minute, ops(take("back:s", sliding, 5)), allowed(5, 0, 2*h-10*time.Minute))
	got, err := do(t, e, clock, h+50*time.Minute, take("back:s", sliding, 1))
	if err != nil || got[0].Allowed {
		t.Fatalf("a sliding window after the clock went back: %+v, %v", got, err)
	}
	// A peek stores nothing: a clock stepped back does not find a state
	// that the peek left at its instant.
	banned := funnel.Limit{Count: 3, Period: time.Second, Burst: 1, Ban: time.Second}
	expect(t, e, clock, 3*h, ops(take("back:p", banned, 1)), allowed(2, 1, 333333333))
	expect(t, e, clock, 3*h+2*time.Second, ops(take("back:p", banned, 0)), allowed(2, 2, 0))
	clock.Set(Day0 + int64(3*h+2*time.Second-time.Millisecond))
	ctx := context.Background()
	if d, ok, err := e.TTL(ctx, "back:p"); ok || err != nil {
		t.Fatalf("TTL after a peek and a clock stepped back: %v, %v, %v", d, ok, err)
	}
	if ok, err := e.Reset(ctx, "back:p"); ok || err != nil {
		t.Fatalf("Reset after a peek and a clock stepped back: %v, %v", ok, err)
	}
}

// Goroutines ask for several limits at once on overlapping keys, with
// Throttle on one of them, at a frozen instant: no key ever admits more than
// its limit, and each key's state is exactly what was admitted (no partial
// charge).
func testConcurrentMulti(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	clock.Set(Day0 + int64(s))
	ctx := context.Background()
	window := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 400, Period: time.Hour}
	fun := funnel.Limit{Count: 1, Period: time.Hour, Burst: 599} // 600 at once
	keys := []string{"{c}:a", "{c}:b", "{c}:c", "{c}:g"}
	limits := []funnel.Limit{window, window, window, fun}
	want := []int64{400, 400, 400, 600}
	sets := [][]int{{0, 1}, {1, 2}, {0, 2}, {0, 1, 2}, {0, 3}, {3, 2}, {3, 1, 0}, {3}, {2}}
	const workers, perWorker = 8, 300
	var admitted [4]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			res := make([]funnel.Result, 3)
			for range perWorker {
				n := int64(1 + r.IntN(2))
				if r.IntN(3) == 0 {
					res, err := Throttle(ctx, e, keys[3], mustParams(t, 599, 1, time.Hour), n)
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						admitted[3].Add(n)
					}
					continue
				}
				set := sets[r.IntN(len(sets))]
				batch := make([]funnel.Op, len(set))
				for i, k := range set {
					c, err := limits[k].Check()
					if err != nil {
						errs <- err
						return
					}
					batch[i] = funnel.Op{Kind: funnel.OpTake, Key: keys[k], Limit: c, N: n}
				}
				if err := e.Do(ctx, batch, res); err != nil {
					errs <- err
					return
				}
				all := true
				for i := range set {
					all = all && res[i].Allowed
				}
				if all {
					for _, k := range set {
						admitted[k].Add(n)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, key := range keys {
		got := admitted[k].Load()
		if got > want[k] {
			t.Errorf("%s admitted %d, above its limit %d", key, got, want[k])
		}
		r, err := do(t, e, clock, s, take(key, limits[k], 0))
		if err != nil {
			t.Fatal(err)
		}
		if r[0].Remaining != want[k]-got {
			t.Errorf("%s: %d admitted, but %d remain of %d: a partial charge", key, got, r[0].Remaining, want[k])
		}
	}
}

// Goroutines race for leases: exactly Count are granted.
func testConcurrentLeases(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	three := funnel.Limit{Algorithm: funnel.Concurrency, Count: 3, Period: time.Minute}
	const workers = 8
	var granted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := three.Check()
			if err == nil {
				res := make([]funnel.Result, 1)
				op := funnel.Op{Kind: funnel.OpTake, Key: "lease", Limit: c, N: 1, Lease: fmt.Sprint("id", w)}
				if err = e.Do(context.Background(), []funnel.Op{op}, res); err == nil && res[0].Allowed {
					granted.Add(1)
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := granted.Load(); got != 3 {
		t.Fatalf("%d leases granted, want 3", got)
	}
	expect(t, e, clock, 0, ops(fop{kind: funnel.OpTake, key: "lease", limit: three}), allowed(3, 0, time.Minute))
}

// limit.conn with 2 leases of 10 s, a burst of 3 and a unit delay of
// 100ms: the leases beyond 2 wait; the latencies that releases report move
// the unit delay; a latency that cannot count is an error that changes
// nothing; a key that holds no lease again starts from the default.
func testConcurrencyQueue(t *testing.T, newStore NewStore) {
	e, clock := newExecutor(t, newStore)
	q := funnel.Limit{Algorithm: funnel.Concurrency, Count: 2, Period: 10 * s, Burst: 3, UnitDelay: 100 * ms}
	peek := fop{kind: funnel.OpTake, key: "q", limit: q}
	expect(t, e, clock, 0, ops(acquire("q", q, "a")), allowed(5, 4, 10*s))
	expect(t, e, clock, 0, ops(acquire("q", q, "b")), allowed(5, 3, 10*s))
	expect(t, e, clock, 0, ops(peek), delayed(5, 3, 10*s, 100*ms))
	expect(t, e, clock, 0, ops(acquire("q", q, "c")), delayed(5, 2, 10*s, 100*ms))
	expect(t, e, clock, 0, ops(acquire("q", q, "d")), delayed(5, 1, 10*s, 100*ms))
	expect(t, e, clock, 0, ops(acquire("q", q, "e")), delayed(5, 0, 10*s, 200*ms))
	expect(t, e, clock, 0, ops(acquire("q", q, "f")), refused(5, 0, 10*s, 10*s))
	expect(t, e, clock, 0, ops(peek), allowed(5, 0, 10*s))
	// Renewing a held lease is not delayed.
	expect(t, e, clock, 0, ops(acquire("q", q, "e")), allowed(5, 0, 10*s))
	// a took 300ms: the unit delay is (100 + 300) / 2 = 200ms.
	expect(t, e, clock, s, ops(releaseAfter("q", "a", 300*ms)), funnel.Result{Allowed: true, ResetAfter: 9 * s})
	expect(t, e, clock, s, ops(peek), delayed(5, 1, 9*s, 400*ms))
	// Latencies that cannot count change nothing.
	expectErr(t, e, clock, s, ops(releaseAfter("q", "a", 300*ms)), funnel.ErrLeaseNotHeld)
	expectErr(t, e, clock, s, ops(releaseAfter("q", "zz", 300*ms)), funnel.ErrLeaseNotHeld)
	expectErr(t, e, clock, s, ops(releaseAfter("none", "a", 300*ms)), funnel.ErrLeaseNotHeld)
	expectErr(t, e, clock, s, ops(releaseAfter("q", "b", -1)), funnel.ErrInvalidQuantity)
	expectErr(t, e, clock, s, ops(releaseAfter("q", "b", algo.MaxUnitDelay+1)), funnel.ErrInvalidQuantity)
	// A lease id longer than funnel.MaxLeaseIDLen is refused, taking or
	// releasing, and changes nothing.
	long := strings.Repeat("i", funnel.MaxLeaseIDLen+1)
	expectErr(t, e, clock, s, ops(acquire("q", q, long)), funnel.ErrInvalidLimit)
	expectErr(t, e, clock, s, ops(release("q", long)), funnel.ErrInvalidLimit)
	expect(t, e, clock, s, ops(peek), delayed(5, 1, 9*s, 400*ms))
	// A release without a latency keeps the unit delay.
	expect(t, e, clock, 2*s, ops(release("q", "b")), funnel.Result{Allowed: true, ResetAfter: 8 * s})
	expect(t, e, clock, 2*s, ops(acquire("q", q, "g")), delayed(5, 1, 10*s, 200*ms))
	expect(t, e, clock, 2*s, ops(acquire("q", q, "h")), delayed(5, 0, 10*s, 400*ms))
	// A latency of 1ns, then the largest.
	expect(t, e, clock, 3*s, ops(releaseAfter("q", "g", 1)), funnel.Result{Allowed: true, ResetAfter: 9 * s})
	expect(t, e, clock, 3*s, ops(peek), delayed(5, 1, 9*s, 200*ms)) // (200ms + 1ns) / 2, twice
	expect(t, e, clock, 3*s, ops(releaseAfter("q", "h", algo.MaxUnitDelay)), funnel.Result{Allowed: true, ResetAfter: 7 * s})
	// Delays stop at the lease's period.
	expect(t, e, clock, 3*s, ops(acquire("q", q, "i")), delayed(5, 1, 10*s, 10*s))
	// Once every lease has expired the key starts again from the default.
	expect(t, e, clock, 13*s, ops(acquire("q", q, "j")), allowed(5, 4, 10*s))
	expect(t, e, clock, 13*s, ops(acquire("q", q, "k")), allowed(5, 3, 10*s))
	expect(t, e, clock, 13*s, ops(acquire("q", q, "l")), delayed(5, 2, 10*s, 100*ms))
}
