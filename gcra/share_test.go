package gcra

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestShareKeepsTheInvariant calls Share from random nodes with random
// demands at random times and checks after every call that the nodes'
// reservations never hold more than the rate and the capacity at any
// instant, and that each grant is within its bounds.
func TestShareKeepsTheInvariant(t *testing.T) {
	for seed := uint64(1); seed <= 24; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		burst := []int64{0, 3, 10, 500, 10_000}[rng.IntN(5)]
		count := []int64{100, 2_000, 20_000}[rng.IntN(3)]
		p, err := NewParams(burst, count, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		nodes := 1 + rng.IntN(16)
		st := map[string]*ShareNode{}
		now := int64(1_700_000_000_000_000)
		L := int64(200_000)
		for i := 0; i < 1500; i++ {
			now += rng.Int64N(L / 8)
			n := fmt.Sprintf("n%d", rng.IntN(nodes))
			d := int64(-1)
			if rng.IntN(10) > 0 {
				d = rng.Int64N(4 * ShareParts / int64(nodes))
			}
			g, err := Share(now, st, p, ShareRequest{Node: n, Demand: d, Lifetime: L, Grace: 5_000, Level: rng.Int64N(p.Limit + 1)})
			if err != nil {
				t.Fatal(err)
			}
			if !ShareHolds(st, g.Now, p) {
				t.Fatalf("seed %d call %d: reservations over the funnel after %+v", seed, i, g)
			}
			switch {
			case g.Now < now || g.Start != g.Now || g.End <= g.Start || g.Hold < g.End:
				t.Fatalf("seed %d: grant's times %+v at %d", seed, g, now)
			case g.K < 0 || g.K > ShareParts || g.C < 0 || g.C > p.Limit || (g.K == 0) != (g.C == 0):
				t.Fatalf("seed %d: grant %+v outside the funnel (limit %d)", seed, g, p.Limit)
			case g.K > 0 && g.Hold-g.End != (ShareDrain(g.C, g.K, p)+999)/1000:
				t.Fatalf("seed %d: hold %d after end, drain %d ns", seed, g.Hold-g.End, ShareDrain(g.C, g.K, p))
			case g.K > 0 && ShareDrain(g.C, g.K, p) > max(p.Tolerance, L*1000):
				t.Fatalf("seed %d: a bucket of %d units at %d parts drains in %d ns, over max(τ, L)", seed, g.C, g.K, ShareDrain(g.C, g.K, p))
			}
		}
	}
}

// TestShareDividesByDemand checks the division itself: two measured nodes
// over the rate split it evenly, a light node gets its demand and the
// heavy one the rest, and an unmeasured node takes at most a quarter.
func TestShareDividesByDemand(t *testing.T) {
	p, _ := NewParams(999, 20_000, time.Second) // τ = 50 ms
	const L = 200_000
	now := int64(1_000_000_000)
	st := map[string]*ShareNode{}
	call := func(n string, d int64) ShareGrant {
		t.Helper()
		g, err := Share(now, st, p, ShareRequest{Node: n, Demand: d, Lifetime: L, Grace: 5_000, Level: p.Limit})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := call("a", -1)
	if g.K != ShareParts/4 || g.End-g.Start != L/4 {
		t.Fatalf("unmeasured first call: %+v, want a quarter of the rate for L/4", g)
	}
	// A capacity that drains in L/4 at a quarter of the rate: 50 ms at
	// 5,000/s is 250 units.
	if g.C != 250 {
		t.Fatalf("unmeasured first call's capacity %d, want 250", g.C)
	}
	now += L / 4
	g = call("a", 2*ShareParts) // twice the rate, alone
	if g.K != ShareParts || g.C != p.Limit || g.End-g.Start != L {
		t.Fatalf("a lone node over the rate: %+v, want all of it for L", g)
	}
	// b arrives: a holds everything until its grant ends and drains.
	g = call("b", 2*ShareParts)
	if g.K != 0 || g.C != 0 {
		t.Fatalf("b while a holds the whole funnel: %+v, want nothing", g)
	}
	// Both renew 10 ms before their grants end: within a few lifetimes
	// they hold half each.
	ends := map[string]int64{"a": now + L, "b": now + L/4}
	last := map[string]ShareGrant{}
	for range 300 {
		now += 10_000
		for _, n := range []string{"a", "b"} {
			if ends[n]-10_000 <= now {
				last[n] = call(n, 2*ShareParts)
				ends[n] = last[n].End
			}
		}
	}
	ga, gb := last["a"], last["b"]
	if ga.K != ShareParts/2 || gb.K != ShareParts/2 {
		t.Fatalf("two nodes over the rate: %d and %d parts, want half each", ga.K, gb.K)
	}
	if ga.C+gb.C > p.Limit || ga.C < p.Limit/2-1 || gb.C < p.Limit/2-1 {
		t.Fatalf("two nodes over the rate: capacities %d and %d of %d", ga.C, gb.C, p.Limit)
	}
	// A light node: its demand, the heavy one the rest (once the others'
	// reservations have ended).
	now += L + 60_000
	st = map[string]*ShareNode{}
	ends = map[string]int64{}
	for range 300 {
		now += 10_000
		for n, d := range map[string]int64{"a": 2 * ShareParts, "c": ShareParts / 10} {
			if ends[n]-10_000 <= now {
				last[n] = call(n, d)
				ends[n] = last[n].End
			}
		}
	}
	ga, gc := last["a"], last["c"]
	if gc.K != ShareParts/10 || ga.K != ShareParts-ShareParts/10 {
		t.Fatalf("light and heavy: %d and %d parts", gc.K, ga.K)
	}
}

// TestShareTargets checks the water-filling on whole parts.
func TestShareTargets(t *testing.T) {
	for _, c := range []struct {
		demands, want []int64
	}{
		{[]int64{ShareParts}, []int64{ShareParts}},
		{[]int64{10}, []int64{ShareParts}}, // what is left over goes to the demands
		{[]int64{shareUnbounded, shareUnbounded}, []int64{ShareParts / 2, ShareParts / 2}},
		{[]int64{100, shareUnbounded}, []int64{100, ShareParts - 100}},
		{[]int64{100, 200}, []int64{100 + (ShareParts-300)/2, 200 + (ShareParts-300)/2}},
		{[]int64{ShareParts, ShareParts, ShareParts}, []int64{ShareParts / 3, ShareParts / 3, ShareParts / 3}},
	} {
		got := shareTargets(c.demands)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("shareTargets(%v) = %v, want %v", c.demands, got, c.want)
		}
		var sum int64
		for _, x := range got {
			sum += x
		}
		if sum > ShareParts {
			t.Errorf("shareTargets(%v) hands out %d parts", c.demands, sum)
		}
	}
}

// TestShareHoldsCatchesOverReservation checks the checker: a reservation
// added past what the others hold is found, at the instant it overlaps.
func TestShareHoldsCatchesOverReservation(t *testing.T) {
	p, _ := NewParams(9, 10, time.Second)
	st := map[string]*ShareNode{
		"a": {Res: []ShareReservation{{Start: 0, Hold: 100, K: ShareParts / 2, C: 5}}},
		"b": {Res: []ShareReservation{{Start: 0, Hold: 50, K: ShareParts / 2, C: 5}}},
	}
	if !ShareHolds(st, 0, p) {
		t.Fatal("a full but legal split fails the check")
	}
	st["b"].Res = append(st["b"].Res, ShareReservation{Start: 10, Hold: 200, K: ShareParts/2 + 1, C: 1})
	if ShareHolds(st, 0, p) {
		t.Fatal("one part over the rate from t=10 on passes the check")
	}
	st["b"].Res[1].K = ShareParts / 2
	st["c"] = &ShareNode{Res: []ShareReservation{{Start: 120, Hold: 130, K: 1, C: 1}}}
	if !ShareHolds(st, 0, p) {
		t.Fatal("a reservation after a's hold fails the check")
	}
	st["c"].Res[0].Start = 99
	if ShareHolds(st, 0, p) {
		t.Fatal("a reservation overlapping a's and b's full ones passes the check")
	}
}

// TestShareClockSteppedBack checks that a call whose time is before a
// reservation's start is served at that start: the allocator's time
// stands still rather than going back.
func TestShareClockSteppedBack(t *testing.T) {
	p, _ := NewParams(99, 100, time.Second)
	st := map[string]*ShareNode{}
	g1, err := Share(1_000_000, st, p, ShareRequest{Node: "a", Demand: ShareParts, Lifetime: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	g2, err := Share(900_000, st, p, ShareRequest{Node: "b", Demand: ShareParts, Lifetime: 200_000})
	if err != nil {
		t.Fatal(err)
	}
	if g2.Now != g1.Now || !ShareHolds(st, g1.Now, p) {
		t.Fatalf("a call 100 ms back in time answered %+v after %+v", g2, g1)
	}
}

// TestShareBadRequests checks that bad requests are refused with
// ErrBadLease and change nothing.
func TestShareBadRequests(t *testing.T) {
	p, _ := NewParams(9, 10, time.Second)
	ok := ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Grace: 5_000}
	big, _ := NewParams(1<<33, 1, time.Nanosecond)
	for name, c := range map[string]struct {
		p   Params
		req ShareRequest
	}{
		"no node":       {p, ShareRequest{Demand: 5, Lifetime: 200_000}},
		"demand -2":     {p, ShareRequest{Node: "a", Demand: -2, Lifetime: 200_000}},
		"demand huge":   {p, ShareRequest{Node: "a", Demand: MaxShareDemand + 1, Lifetime: 200_000}},
		"lifetime 0":    {p, ShareRequest{Node: "a", Demand: 5}},
		"lifetime huge": {p, ShareRequest{Node: "a", Demand: 5, Lifetime: MaxShareLifetime + 1}},
		"grace > L":     {p, ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Grace: 200_001}},
		"grace < 0":     {p, ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Grace: -1}},
		"level < 0":     {p, ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Level: -1}},
		"level > limit": {p, ShareRequest{Node: "a", Demand: 5, Lifetime: 200_000, Level: 11}},
		"limit huge":    {big, ok},
		"zero params":   {Params{}, ok},
	} {
		st := map[string]*ShareNode{}
		if _, err := Share(1_000_000, st, c.p, c.req); !errors.Is(err, ErrBadLease) {
			t.Errorf("%s: error %v, want ErrBadLease", name, err)
		}
		if len(st) != 0 {
			t.Errorf("%s: the state changed: %v", name, st)
		}
	}
}

// TestShareLevelCutsOlderReservations checks that a renewal that reports a
// low level frees the capacity of the caller's older grants at once (once
// the grace and the level's drain have passed), rather than after the
// drain of a full bucket: 100/s with a burst of 999 (τ 10 s).
func TestShareLevelCutsOlderReservations(t *testing.T) {
	p, _ := NewParams(999, 100, time.Second)
	st := map[string]*ShareNode{}
	const L = 200_000
	now := int64(1_000_000_000)
	call := func(n string, level int64) ShareGrant {
		t.Helper()
		g, err := Share(now, st, p, ShareRequest{Node: n, Demand: ShareParts / 10, Lifetime: L, Grace: 5_000, Level: level})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := call("a", 0); g.C != p.Limit {
		t.Fatalf("a alone: %+v, want the whole capacity", g)
	}
	now += 1_000
	if g := call("b", 0); g.C != 0 {
		t.Fatalf("b while a holds everything: %+v", g)
	}
	now += L - 20_000
	ga := call("a", 3) // a renews with 3 units in its bucket
	if ga.C > p.Limit*3/4 {
		t.Fatalf("a's renewal with b competing: %+v, want about half the capacity", ga)
	}
	now += 5_000 + 1_000_000/20 + 1
	// a's first grant now holds 3 units at most, for 35 ms: b gets the
	// rest of the capacity, not nothing until a full bucket's drain (10 s).
	g := call("b", 0)
	if g.C+ga.C < p.Limit-3 || g.C == 0 {
		t.Fatalf("b after a's renewal at level 3: %+v (a %+v), want the rest of the capacity", g, ga)
	}
	if !ShareHolds(st, g.Now, p) {
		t.Fatal("over the funnel")
	}
}
