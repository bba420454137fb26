package storetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// Reservations (funnel.ReserveStore): a cost taken at its estimate and
// settled at its actual amount, by the settle rule of each algorithm.

// rstep is one step of a reservation case at offset at from Day0: a
// reserve (do 'r'), a settle ('s') or a take ('t').
type rstep struct {
	at    time.Duration
	do    byte
	key   string
	limit funnel.Limit
	n     int64 // the estimate, the actual or the quantity
	id    string
	ttl   time.Duration
	want  funnel.Result
	// est and again are a settle's Settlement.Estimate and Again, actual
	// its Actual; err, when set, the error the step wraps.
	est, actual int64
	again       bool
	err         error
}

// fixed5in250 is a fixed window of 5 units per 250 ms.
var fixed5in250 = funnel.Limit{Algorithm: funnel.FixedWindow, Count: 5, Period: 250 * time.Millisecond}

// log4in3 is a sliding log of 4 units in any 3 seconds.
var log4in3 = funnel.Limit{Algorithm: funnel.SlidingLog, Count: 4, Period: 3 * time.Second}

// reserveAt is a reserve of n units with a TTL of a minute.
func reserveAt(at time.Duration, key string, l funnel.Limit, n int64, id string, want funnel.Result) rstep {
	return rstep{at: at, do: 'r', key: key, limit: l, n: n, id: id, ttl: time.Minute, want: want}
}

// settleAt is a settle that answers want, est and actual.
func settleAt(at time.Duration, key, id string, n int64, want funnel.Result, est, actual int64, again bool) rstep {
	return rstep{at: at, do: 's', key: key, id: id, n: n, want: want, est: est, actual: actual, again: again}
}

// failsAt is a settle that fails with err.
func failsAt(at time.Duration, key, id string, n int64, err error) rstep {
	return rstep{at: at, do: 's', key: key, id: id, n: n, err: err}
}

func takeAt(at time.Duration, key string, l funnel.Limit, n int64, want funnel.Result) rstep {
	return rstep{at: at, do: 't', key: key, limit: l, n: n, want: want}
}

func chargeAt(at time.Duration, key string, l funnel.Limit, n int64, want funnel.Result) rstep {
	return rstep{at: at, do: 'c', key: key, limit: l, n: n, want: want}
}

var reserveCases = []struct {
	name  string
	steps []rstep
}{
	{
		// funnel5: 5 at once, then one a second.
		name: "Funnel",
		steps: []rstep{
			reserveAt(0, "g", funnel5, 3, "a", allowed(5, 2, 3*s)),
			// Below the estimate: 2 units given back.
			settleAt(0, "g", "a", 1, allowed(5, 4, s), 3, 1, false),
			// Settled once: a second settle changes nothing and says so.
			settleAt(0, "g", "a", 5, allowed(5, 4, s), 3, 1, true),
			reserveAt(500*ms, "g", funnel5, 4, "b", allowed(5, 0, 4500*ms)),
			// Above the estimate: 5 more charged, into debt.
			settleAt(500*ms, "g", "b", 9, refused(5, 0, 4500*ms, 9500*ms), 4, 9, false),
			takeAt(10*s, "g", funnel5, 1, allowed(5, 4, s)),
			// At the estimate: nothing changes.
			reserveAt(10*s, "g", funnel5, 2, "c", allowed(5, 2, 3*s)),
			settleAt(10*s, "g", "c", 2, allowed(5, 2, 3*s), 2, 2, false),
			// Refused: no reservation.
			reserveAt(10*s, "g", funnel5, 3, "d", refused(5, 2, s, 3*s)),
			failsAt(10*s, "g", "d", 3, funnel.ErrUnknownReservation),
			// Another key's id, an id never made.
			failsAt(10*s, "h", "c", 3, funnel.ErrUnknownReservation),
			failsAt(10*s, "g", "zz", 3, funnel.ErrUnknownReservation),
			// A debt that does not fit changes nothing, and the
			// reservation can still be settled.
			reserveAt(10*s, "o", funnel5, 1, "e", allowed(5, 4, s)),
			failsAt(10*s, "o", "e", math.MaxInt64, gcra.ErrOverflow),
			settleAt(10*s, "o", "e", 1, allowed(5, 4, s), 1, 1, false),
			// Only what the key still counts is given back: the TAT never
			// goes back before now.
			reserveAt(20*s, "f", funnel5, 5, "f", allowed(5, 0, 5*s)),
			settleAt(24*s, "f", "f", 0, allowed(5, 5, 0), 5, 0, false),
			// Units of the estimate that have drained by the settle are
			// not given back: the key holds others' units by then. 5 at
			// 30 s, drained at 35 s, when 5 more are taken: a settle at 0
			// gives nothing back (it would admit 5 more at once).
			reserveAt(30*s, "d", funnel5, 5, "g", allowed(5, 0, 5*s)),
			takeAt(35*s, "d", funnel5, 5, allowed(5, 0, 5*s)),
			settleAt(35*s, "d", "g", 0, allowed(5, 0, 5*s), 5, 0, false),
			takeAt(35*s, "d", funnel5, 1, refused(5, 0, s, 5*s)),
			// Partly drained: 4 at 40 s, 3 more at 42 s (TAT 47 s); of
			// the 4, the 2 that have not drained are given back (TAT
			// 45 s), as if the reserve had taken nothing.
			reserveAt(40*s, "p", funnel5, 4, "h", allowed(5, 1, 4*s)),
			takeAt(42*s, "p", funnel5, 3, allowed(5, 0, 5*s)),
			settleAt(42*s, "p", "h", 0, allowed(5, 2, 3*s), 4, 0, false),
		},
	},
	{
		// The TTL ends a reservation, settled or not, to the nanosecond.
		name: "TTL",
		steps: []rstep{
			{at: 30 * s, do: 'r', key: "x", limit: funnel5, n: 1, id: "t", ttl: s, want: allowed(5, 4, s)},
			settleAt(31*s-1, "x", "t", 1, allowed(5, 4, 1), 1, 1, false),
			settleAt(31*s-1, "x", "t", 2, allowed(5, 4, 1), 1, 1, true),
			failsAt(31*s, "x", "t", 1, funnel.ErrUnknownReservation),
			// Never settled: settled at its estimate (nothing more
			// charged or given back), then forgotten.
			{at: 40 * s, do: 'r', key: "y", limit: funnel5, n: 3, id: "u", ttl: 2 * ms, want: allowed(5, 2, 3*s)},
			failsAt(40*s+2*ms, "y", "u", 0, funnel.ErrUnknownReservation),
			takeAt(40*s+2*ms, "y", funnel5, 0, allowed(5, 2, 3*s-2*ms)),
		},
	},
	{
		// A leaky bucket's reserve is told its delay; a settle is not.
		name: "LeakyBucket",
		steps: []rstep{
			reserveAt(0, "b", leaky, 2, "a", delayed(5, 3, 200*ms, 0)),
			reserveAt(0, "b", leaky, 1, "b", delayed(5, 2, 300*ms, 200*ms)),
			settleAt(0, "b", "a", 1, allowed(5, 3, 200*ms), 2, 1, false),
			settleAt(0, "b", "b", 3, allowed(5, 1, 400*ms), 1, 3, false),
			// Drained units are not given back (as the funnel's).
			reserveAt(s, "c", leaky, 5, "c", allowed(5, 0, 500*ms)),
			takeAt(1500*ms, "c", leaky, 5, delayed(5, 0, 500*ms, 0)),
			settleAt(1500*ms, "c", "c", 0, allowed(5, 0, 500*ms), 5, 0, false),
		},
	},
	{
		// 3 per aligned second: units are given back only in the window
		// they were taken in.
		name: "FixedWindow",
		steps: []rstep{
			reserveAt(100*ms, "f", fixed3, 2, "a", allowed(3, 1, 900*ms)),
			takeAt(200*ms, "f", fixed3, 1, allowed(3, 0, 800*ms)),
			settleAt(300*ms, "f", "a", 0, allowed(3, 2, 700*ms), 2, 0, false),
			reserveAt(400*ms, "f", fixed3, 2, "b", allowed(3, 0, 600*ms)),
			settleAt(1100*ms, "f", "b", 0, allowed(3, 3, 0), 2, 0, false),
			reserveAt(1100*ms, "f", fixed3, 2, "c", allowed(3, 1, 900*ms)),
			settleAt(1100*ms, "f", "c", 4, refused(3, 0, 900*ms, 900*ms), 2, 4, false),
			// A window that has ended is given nothing back.
			reserveAt(2100*ms, "f2", fixed3, 3, "d", allowed(3, 0, 900*ms)),
			takeAt(3100*ms, "f2", fixed3, 2, allowed(3, 1, 900*ms)),
			settleAt(3200*ms, "f2", "d", 0, allowed(3, 1, 800*ms), 3, 0, false),
			// The clock stepped back: the state of a later window counts
			// as the current one's, but holds none of the reservation's
			// units, and nothing is given back from it (the 2 would be
			// given back from the 3 of the window at 6 s, which would
			// then admit 5).
			reserveAt(5100*ms, "f3", fixed3, 2, "f", allowed(3, 1, 900*ms)),
			takeAt(6100*ms, "f3", fixed3, 3, allowed(3, 0, 900*ms)),
			settleAt(5200*ms, "f3", "f", 0, allowed(3, 0, 800*ms), 2, 0, false),
			takeAt(6200*ms, "f3", fixed3, 1, refused(3, 0, 800*ms, 800*ms)),
			// A give-back keeps the state's expiry: the window's end under
			// the limit that wrote it last (250 ms), which counts the
			// reservation's units as its own, not the reservation's
			// limit's (1 s). Past 20.25 s the state is empty.
			reserveAt(20100*ms, "f4", fixed3, 2, "h", allowed(3, 1, 900*ms)),
			takeAt(20200*ms, "f4", fixed5in250, 1, allowed(5, 2, 50*ms)),
			settleAt(20210*ms, "f4", "h", 0, allowed(3, 2, 790*ms), 2, 0, false),
			takeAt(20300*ms, "f4", fixed3, 3, allowed(3, 0, 700*ms)),
		},
	},
	{
		// 4 per second: units are given back from the window that counts
		// them, the current one or the previous one.
		name: "SlidingWindow",
		steps: []rstep{
			reserveAt(0, "w", sliding4, 4, "a", allowed(4, 0, 2*s)),
			// From the previous window: nothing of the 4 weighs any more
			// (a plain refund would leave ⌈4·750/1000⌉ = 3).
			settleAt(1250*ms, "w", "a", 0, allowed(4, 4, 0), 4, 0, false),
			reserveAt(1300*ms, "w", sliding4, 2, "b", allowed(4, 2, 1700*ms)),
			// Two windows later: nothing counts it, nothing is given back.
			// (at 2.1 s, ⌈2·900/1000⌉ = 2 of the previous window count)
			takeAt(2100*ms, "w", sliding4, 1, allowed(4, 1, 1900*ms)),
			settleAt(3100*ms, "w", "b", 0, allowed(4, 3, 900*ms), 2, 0, false),
			// From the current window.
			reserveAt(3100*ms, "w", sliding4, 3, "c", allowed(4, 0, 1900*ms)),
			settleAt(3200*ms, "w", "c", 1, allowed(4, 2, 1800*ms), 3, 1, false),
			// The clock stepped back: nothing is given back from the
			// state of a later window, nor is it rewritten as the current
			// window's (the 2 would be given back from the 2 taken at
			// 6.1 s, which would then weigh as the previous window's).
			reserveAt(5100*ms, "w2", sliding4, 2, "d", allowed(4, 2, 1900*ms)),
			takeAt(6100*ms, "w2", sliding4, 2, allowed(4, 0, 1900*ms)),
			settleAt(5200*ms, "w2", "d", 0, allowed(4, 0, 1800*ms), 2, 0, false),
			takeAt(6200*ms, "w2", sliding4, 1, refused(4, 0, 300*ms, 1800*ms)),
		},
	},
	{
		// 3 in any second: the reservation's own entries are dropped, not
		// the newest.
		name: "SlidingLog",
		steps: []rstep{
			reserveAt(0, "l", log3, 2, "a", allowed(3, 1, s)),
			takeAt(100*ms, "l", log3, 1, allowed(3, 0, s)),
			settleAt(200*ms, "l", "a", 0, allowed(3, 2, 900*ms), 2, 0, false),
			reserveAt(200*ms, "l", log3, 1, "b", allowed(3, 1, s)),
			// Its entry has left the log: nothing to give back.
			settleAt(1300*ms, "l", "b", 0, allowed(3, 3, 0), 1, 0, false),
			reserveAt(1300*ms, "l", log3, 1, "c", allowed(3, 2, s)),
			// At the limit is within it; one more is over it.
			settleAt(1400*ms, "l", "c", 3, allowed(3, 0, s), 1, 3, false),
			reserveAt(1400*ms, "l2", log3, 1, "d", allowed(3, 2, s)),
			settleAt(1500*ms, "l2", "d", 4, refused(3, 0, 900*ms, s), 1, 4, false),
			// A charge over the count keeps the newest count+1 entries
			// of the log (algo.LogCharge): of the 2 reserved and 3
			// charged at 2 s, 4 are kept. A settle at 0 cannot tell
			// whose entries were dropped, and gives back none (dropping
			// 2 would leave 2 and admit 1 more, where 3 were spent).
			reserveAt(2*s, "l3", log3, 2, "e", allowed(3, 1, s)),
			chargeAt(2*s, "l3", log3, 3, refused(3, 0, s, s)),
			settleAt(2100*ms, "l3", "e", 0, refused(3, 0, 900*ms, 900*ms), 2, 0, false),
			takeAt(2100*ms, "l3", log3, 1, refused(3, 0, 900*ms, 900*ms)),
			// A settle that gives nothing back leaves the log as it is:
			// its entries, and its expiry under the limit that wrote it
			// last (a second, here), not the reservation's (3 s). At
			// 13.6 s the log is empty and another algorithm may take the
			// key.
			reserveAt(10*s, "l5", log4in3, 3, "g", allowed(4, 1, 3*s)),
			takeAt(12500*ms, "l5", log3, 1, allowed(3, 2, s)),
			settleAt(12600*ms, "l5", "g", 2, allowed(4, 3, 2900*ms), 3, 2, false),
			takeAt(13600*ms, "l5", fixed3, 1, allowed(3, 2, 400*ms)),
			// A settle that gives back keeps the log's expiry under the
			// limit that wrote it last (3 s, here), not the
			// reservation's (1 s): at 32 s the entry of 30.5 s still
			// counts, and another algorithm may not take the key.
			reserveAt(30*s, "l6", log3, 1, "i", allowed(3, 2, s)),
			takeAt(30500*ms, "l6", log4in3, 1, allowed(4, 2, 3*s)),
			settleAt(30600*ms, "l6", "i", 0, allowed(3, 2, 900*ms), 1, 0, false),
			takeAt(32*s, "l6", log4in3, 3, allowed(4, 0, 3*s)),
		},
	},
}

// RunReserve runs the reservation cases (funnel.ReserveStore) against
// stores built by newStore; a store that keeps no reservations skips them.
// Keys and ids are each case's own.
func RunReserve(t *testing.T, newStore NewStore) {
	if _, ok := funnel.ReserveOf(newStore(t, NewClock(Day0).Now)); !ok {
		t.Skip("the store keeps no reservations")
	}
	t.Run("Steps", func(t *testing.T) {
		for _, tc := range reserveCases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				st, clock := newExecutor(t, newStore)
				for i, sp := range tc.steps {
					runReserveStep(t, st, clock, i, sp)
				}
			})
		}
	})
	t.Run("Bans", func(t *testing.T) { t.Parallel(); testReserveBans(t, newStore) })
	t.Run("Errors", func(t *testing.T) { t.Parallel(); testReserveErrors(t, newStore) })
}

func runReserveStep(t *testing.T, st funnel.Store, clock *Clock, i int, sp rstep) {
	t.Helper()
	ctx := context.Background()
	rs, _ := funnel.ReserveOf(st)
	clock.Set(Day0 + int64(sp.at))
	what := fmt.Sprintf("step %d at %v: %c %q", i, sp.at, sp.do, sp.key)
	switch sp.do {
	case 'r':
		c, err := sp.limit.Check()
		if err != nil {
			t.Fatal(err)
		}
		got, err := rs.Reserve(ctx, sp.key, c, sp.n, sp.id, sp.ttl)
		if err != nil || got != sp.want {
			t.Fatalf("%s reserve %d as %q: %+v, %v; want %+v", what, sp.n, sp.id, got, err, sp.want)
		}
	case 's':
		got, err := rs.Settle(ctx, sp.key, sp.id, sp.n)
		if sp.err != nil {
			if !errors.Is(err, sp.err) || got != (funnel.Settlement{}) {
				t.Fatalf("%s settle %q at %d: %+v, %v; want an error wrapping %v", what, sp.id, sp.n, got, err, sp.err)
			}
			return
		}
		want := funnel.Settlement{Result: sp.want, Estimate: sp.est, Actual: sp.actual, Again: sp.again}
		if err != nil || got != want {
			t.Fatalf("%s settle %q at %d: %+v, %v; want %+v", what, sp.id, sp.n, got, err, want)
		}
	case 't':
		expect(t, st, clock, sp.at, ops(take(sp.key, sp.limit, sp.n)), sp.want)
	case 'c':
		expect(t, st, clock, sp.at, ops(charge(sp.key, sp.limit, sp.n)), sp.want)
	}
}

// A settle that leaves a key over a limit with a Ban starts the ban, as a
// charge does; a refused reserve starts it as a refused take does.
func testReserveBans(t *testing.T, newStore NewStore) {
	st, clock := newExecutor(t, newStore)
	g := funnel5
	g.Ban = time.Minute
	for i, sp := range []rstep{
		reserveAt(0, "rb", g, 5, "a", allowed(5, 0, 5*s)),
		settleAt(0, "rb", "a", 6, banned(5, time.Minute, 6*s), 5, 6, false),
		reserveAt(s, "rb2", g, 6, "b", banned(5, funnel.Never, 0)),
		reserveAt(s, "rb3", g, 5, "c", allowed(5, 0, 5*s)),
		reserveAt(s, "rb3", g, 1, "d", banned(5, time.Minute, 5*s)),
	} {
		runReserveStep(t, st, clock, i, sp)
	}
	bans, err := st.Bans(context.Background())
	if err != nil || len(bans) != 3 {
		t.Fatalf("bans: %v, %v; want rb, rb2 and rb3", bans, err)
	}
}

// Bad calls change nothing and say why.
func testReserveErrors(t *testing.T, newStore NewStore) {
	st, clock := newExecutor(t, newStore)
	ctx := context.Background()
	rs, _ := funnel.ReserveOf(st)
	g, _ := funnel5.Check()
	conc, _ := conc2.Check()
	fixedZone, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Calendar: funnel.Daily, Location: time.FixedZone("UTC+5:30", 19800)}.Check()
	if err != nil {
		t.Fatal(err)
	}
	localZone, err := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 3, Calendar: funnel.Daily, Location: time.Local}.Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit funnel.Checked
		n     int64
		id    string
		ttl   time.Duration
		err   error
	}{
		{conc, 1, "a", s, funnel.ErrInvalidLimit},
		{g, 0, "a", s, funnel.ErrInvalidQuantity},
		{g, -1, "a", s, funnel.ErrInvalidQuantity},
		{g, 1, "", s, funnel.ErrInvalidLimit},
		{g, 1, string(make([]byte, funnel.MaxLeaseIDLen+1)), s, funnel.ErrInvalidLimit},
		{g, 1, "a", 0, funnel.ErrInvalidQuantity},
		{g, 1, "a", ms + 1, funnel.ErrInvalidQuantity},
		{g, 1, "a", funnel.MaxReservationTTL + ms, funnel.ErrInvalidQuantity},
		{funnel.Checked{Limit: funnel5}, 1, "a", s, funnel.ErrInvalidLimit},
		{fixedZone, 1, "a", s, funnel.ErrInvalidLimit},
		{localZone, 1, "a", s, funnel.ErrInvalidLimit},
	} {
		if r, err := rs.Reserve(ctx, "re", c.limit, c.n, c.id, c.ttl); !errors.Is(err, c.err) {
			t.Errorf("Reserve(%v, %d, %d-byte id, %v) = %+v, %v; want %v", c.limit.Limit, c.n, len(c.id), c.ttl, r, err, c.err)
		}
	}
	// A key that holds another algorithm's state.
	expect(t, st, clock, 0, ops(take("re-w", fixed3, 1)), allowed(3, 2, s))
	if _, err := rs.Reserve(ctx, "re-w", g, 1, "w", s); !errors.Is(err, funnel.ErrWrongType) {
		t.Errorf("Reserve on a fixed window's key: %v; want ErrWrongType", err)
	}
	// The key holds nothing, and no id was recorded.
	expect(t, st, clock, 0, ops(take("re", funnel5, 0)), allowed(5, 5, 0))
	for _, id := range []string{"a", "w", ""} {
		if _, err := rs.Settle(ctx, "re", id, 1); !errors.Is(err, funnel.ErrUnknownReservation) {
			t.Errorf("Settle(%q) after refused reserves: %v; want ErrUnknownReservation", id, err)
		}
	}
	// A key whose state changed algorithm under a pending reservation.
	f, _ := fixed3.Check()
	if _, err := rs.Reserve(ctx, "re-x", f, 1, "x", s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reset(ctx, "re-x"); err != nil {
		t.Fatal(err)
	}
	expect(t, st, clock, 0, ops(take("re-x", funnel5, 1)), allowed(5, 4, s))
	if _, err := rs.Settle(ctx, "re-x", "x", 3); !errors.Is(err, funnel.ErrWrongType) {
		t.Errorf("Settle under a fixed window of a funnel's key: %v; want ErrWrongType", err)
	}
	if got, err := rs.Settle(ctx, "re-x", "x", 1); !errors.Is(err, funnel.ErrWrongType) {
		t.Errorf("Settle at the estimate under a fixed window of a funnel's key: %+v, %v; want ErrWrongType", got, err)
	}
	// Still pending once the key is a fixed window's again (a Reset does
	// not end a key's reservations: what a settle gives back is bounded by
	// the estimate, and a Reset has given a full window anyway).
	if _, err := st.Reset(ctx, "re-x"); err != nil {
		t.Fatal(err)
	}
	expect(t, st, clock, 0, ops(take("re-x", fixed3, 2)), allowed(3, 1, s))
	want := funnel.Settlement{Result: allowed(3, 2, s), Estimate: 1, Actual: 0}
	if got, err := rs.Settle(ctx, "re-x", "x", 0); err != nil || got != want {
		t.Errorf("Settle after the errors: %+v, %v; want %+v", got, err, want)
	}
}
