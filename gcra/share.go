package gcra

import (
	"fmt"
	"math"
	"sort"
)

// ShareParts is the number of parts a funnel's rate R = 1/Interval is
// divided into for rate shares: a share's rate is a whole number of parts,
// k·R/ShareParts.
const ShareParts = 1 << 20

// MaxShareDemand is the largest demand (in parts of the rate, 1,024 times
// the rate) that Share takes: beyond it the water-filling is the same.
const MaxShareDemand = 1 << 30

// shareUnbounded stands for an unmeasured demand, above every other.
const shareUnbounded = 1 << 31

// Bounds of a share allocation, so that the Redis script that reproduces
// Share computes every number exactly in doubles (below 2^53).
const (
	// MaxShareLimit is the largest Limit (burst+1) of a funnel leased in
	// shares.
	MaxShareLimit = 1 << 32
	// MaxShareLifetime is the longest grant, in µs (one hour).
	MaxShareLifetime = 3_600_000_000
)

// ShareReservation is one grant's hold on a funnel's rate and capacity, in
// the allocator's time (µs): k parts of the rate and c units of capacity,
// from Start (the call that made it) until Hold, by which a bucket of c
// units full at the grant's end has drained at k.
type ShareReservation struct {
	Start, Hold int64
	K, C        int64
}

// ShareNode is one node's record in a key's share state: its live
// reservations, the demand it last reported (parts of the rate, -1 when
// not yet measured) and the instant (µs) until which it competes for a
// share without holding one.
type ShareNode struct {
	Demand int64
	Seen   int64
	Res    []ShareReservation
}

// ShareRequest is one node's call for a share of a key's funnel.
type ShareRequest struct {
	// Node names the caller: one process incarnation, so that a process
	// that restarts never inherits a level it does not know.
	Node string
	// Demand is the caller's demand in parts of the rate (ShareParts is
	// the whole rate; it may be above it), or -1 when not yet measured.
	Demand int64
	// Lifetime is how long a grant lets the node admit, in µs (L); a
	// grant lasts L/4 while the node's demand is not measured or the
	// other nodes still hold a fifth of what it needs.
	Lifetime int64
	// Grace is how long after the call the node may still admit under
	// its older grants, in µs: Share ends them then (and their holds once
	// they have drained), so that a share that shrinks is given back
	// within Grace plus its drain, not at its old end.
	Grace int64
	// Level caps the caller's level under its older grants from the
	// call's send on, in units: the node keeps its level within it while
	// it admits under them (its level when it sent the call, plus what it
	// may admit during the grace). Share cuts their capacities to it, and
	// their holds to the time it drains, so that a node whose bucket is
	// nearly empty does not hold its whole capacity for the drain of a
	// full one.
	Level int64
}

// ShareGrant is Share's answer, in the allocator's time (µs): admit in
// [Start, End) through a local bucket of rate K parts and capacity C
// units, and drain it at K until Hold. K and C are 0 when nothing could be
// granted.
type ShareGrant struct {
	Now, Start, End, Hold int64
	K, C                  int64
}

// ShareDrain returns how long, in ns rounded up, a bucket of c units takes
// to drain at k parts of the rate of p: c·Interval·ShareParts/k.
func ShareDrain(c, k int64, p Params) int64 {
	if k <= 0 || c <= 0 {
		return 0
	}
	a := c * p.Interval
	q, r := a/k, a%k
	return q*ShareParts + (r*ShareParts+k-1)/k
}

// shareDrainMicros is ShareDrain in µs, rounded up.
func shareDrainMicros(c, k int64, p Params) int64 {
	return (ShareDrain(c, k, p) + 999) / 1000
}

// Share serves one node's call for a share of the funnel p at the
// allocator's time now (µs), updating st, the key's share state (node name
// to record; nil entries are not allowed). It is the allocator of the
// rate-shares lease mode (see package leasestore): the node then admits
// from memory through a bucket of its own, whose rate and capacity Share
// keeps reserved, so that the fleet as a whole never admits more than one
// exact funnel:
//
//	(I) at every instant t, the sum over nodes of the largest k (and of
//	the largest c) among each node's reservations live at t (Start ≤ t <
//	Hold) is at most ShareParts (at most p.Limit).
//
// Each call first cuts the caller's older reservations to the capacity
// Level and ends them at now + Grace plus Level's drain, drops the reservations whose hold has passed and the
// nodes with none that stopped competing, then divides the rate by
// max-min fairness (water-filling) among the caller and every node that
// holds a reservation or called within 1.25 lifetimes, on their reported
// demands (a node whose demand is not measured counts as unbounded; what
// the demands leave over is split equally), and the capacity in
// proportion to the square roots of those targets. The caller's grant is
// its target, cut to what the others' reservations leave free at now (they
// all started at or before now, so their holdings only fall later), its
// capacity to what its rate drains in the longer of the tolerance and the
// lifetime, and to at least one unit or nothing. A caller whose demand is
// not measured takes at most a quarter of the rate and of the capacity
// that the others leave free, and a capacity that drains in a quarter of
// the lifetime: nodes that start together on a key all get a part while
// their demands are measured, rather than the first few all of it. The grant lasts L, or L/4 while
// the caller's demand is unmeasured or the others still hold more than a
// fifth of what its demand needs.
//
// Every number is an integer below 2^53, so that the Redis script that
// reproduces Share computes the same grants in doubles. Errors
// (ErrBadLease) change nothing.
func Share(now int64, st map[string]*ShareNode, p Params, req ShareRequest) (ShareGrant, error) {
	if err := CheckShare(p, req); err != nil {
		return ShareGrant{}, err
	}
	if now < 0 || now > 1<<52 {
		return ShareGrant{}, fmt.Errorf("%w: time %d µs", ErrBadLease, now)
	}
	L, grace := req.Lifetime, req.Grace
	// The allocator's time never goes back: a reservation that started
	// after now (a clock stepped back) would still be growing. Standing
	// still instead only makes every grant and hold end later in real
	// time than the nodes, which count their own time, take them to.
	for _, nd := range st {
		for _, r := range nd.Res {
			now = max(now, r.Start)
		}
	}
	me := st[req.Node]
	if me == nil {
		me = &ShareNode{}
		st[req.Node] = me
	}
	me.Demand = req.Demand
	// The caller stopped admitting under its older grants Grace after it
	// sent this call (before now), its level within Level, and drains
	// them by then plus Level's drain.
	for i, r := range me.Res {
		c := min(r.C, req.Level)
		me.Res[i].C = c
		me.Res[i].Hold = min(r.Hold, now+grace+shareDrainMicros(c, r.K, p))
	}
	me.Seen = now + L + L/4

	// Prune, and sum the others' holdings at now.
	var usedK, usedC int64
	names := make([]string, 0, len(st))
	for name, nd := range st {
		live := nd.Res[:0]
		for _, r := range nd.Res {
			if r.Hold > now {
				live = append(live, r)
			}
		}
		nd.Res = live
		if nd != me && len(live) == 0 && nd.Seen <= now {
			delete(st, name)
			continue
		}
		names = append(names, name)
		if nd != me {
			k, c := shareUsage(nd.Res, now)
			usedK += k
			usedC += c
		}
	}
	sort.Strings(names) // a fixed order: the targets do not depend on it, but keep the loops reproducible

	// Targets: water-filling of ShareParts on the demands.
	demands := make([]int64, len(names))
	for i, name := range names {
		d := st[name].Demand
		if d < 0 {
			d = shareUnbounded
		}
		demands[i] = d
	}
	targets := shareTargets(demands)
	var mine int
	var sumW int64
	for i, name := range names {
		w := isqrt(targets[i])
		sumW += w
		if name == req.Node {
			mine = i
		}
	}
	kT := min(targets[mine], ShareParts)
	unmeasured := req.Demand < 0
	var cT int64
	if sumW > 0 {
		// p.Limit·w < 2^32·2^10 fits a double exactly.
		cT = p.Limit * isqrt(targets[mine]) / sumW
	}
	span := max(p.Tolerance, L*1000) // ns
	if unmeasured {
		kT = min(kT, (ShareParts-usedK)/4)
		span = L * 1000 / 4
	}
	intervals := span / p.Interval // below 2^32 (CheckShare)
	cT = max(cT, 1)                // within what k drains in the span: see c below
	if unmeasured {
		cT = min(cT, max((p.Limit-usedC)/4, 1))
	}

	k := min(kT, ShareParts-usedK)
	c := min(cT, p.Limit-usedC, k*intervals/ShareParts)
	life := L
	kD := kT
	if !unmeasured {
		kD = min(kT, req.Demand)
	}
	if unmeasured || k*10 < kD*8 {
		life = L / 4
	}
	if k <= 0 || c < 1 {
		k, c = 0, 0
	}
	g := ShareGrant{Now: now, Start: now, End: now + life, K: k, C: c}
	g.Hold = g.End
	if k > 0 {
		g.Hold += shareDrainMicros(c, k, p)
		me.Res = append(me.Res, ShareReservation{Start: g.Start, Hold: g.Hold, K: k, C: c})
	}
	return g, nil
}

// shareUsage returns what one node's reservations hold at t: the largest
// rate and the largest capacity among those live at t (one bucket per
// node: its grants overlap, and it drains at the largest rate).
func shareUsage(res []ShareReservation, t int64) (k, c int64) {
	for _, r := range res {
		if r.Start <= t && t < r.Hold {
			k = max(k, r.K)
			c = max(c, r.C)
		}
	}
	return k, c
}

// shareTargets returns the max-min fair division of ShareParts among the
// demands (water-filling), with whatever the demands leave over split
// equally, in whole parts (the remainder of a division is left unused).
func shareTargets(demands []int64) []int64 {
	sorted := append([]int64(nil), demands...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	left := int64(ShareParts)
	level := int64(shareUnbounded)
	for i, d := range sorted {
		rest := int64(len(sorted) - i)
		if d >= left/rest {
			level = left / rest
			left = 0
			break
		}
		left -= d
	}
	extra := left / int64(len(demands))
	out := make([]int64, len(demands))
	for i, d := range demands {
		out[i] = min(d, level) + extra
	}
	return out
}

// isqrt returns ⌊√x⌋ for 0 ≤ x ≤ 2^52, as a double's square root gives
// it.
func isqrt(x int64) int64 {
	if x <= 0 {
		return 0
	}
	return int64(math.Sqrt(float64(min(x, 1<<52))))
}

// ShareFence returns the fence of the share state st as Share leaves it at
// now (µs): a TAT, in nanoseconds of the allocator's clock, that the
// funnel's own key holds while a reservation is live, so that a plain
// decision of the key (Decide on its TAT, as redis-cell's module, a plain
// store or a lease in units decide) finds the bucket full until every
// node's bucket has drained. It is the last hold plus the tolerance: such
// a decision admits q units at t only when the TAT is within τ − q·T of
// t, that is from the last hold plus q intervals on. It is 0 when no
// reservation of st holds after now.
func ShareFence(st map[string]*ShareNode, now int64, p Params) int64 {
	var last int64
	for _, nd := range st {
		for _, r := range nd.Res {
			last = max(last, r.Hold)
		}
	}
	if last <= now {
		return 0
	}
	return last*1000 + p.Tolerance
}

// ShareHolds reports whether the share state st keeps the invariant (I)
// of Share at every instant from now on: the nodes' largest live
// reservations add up to at most ShareParts of rate and p.Limit units of
// capacity. The sums change only where a reservation starts or ends.
func ShareHolds(st map[string]*ShareNode, now int64, p Params) bool {
	pts := []int64{now}
	for _, nd := range st {
		for _, r := range nd.Res {
			if r.Start > now {
				pts = append(pts, r.Start)
			}
			if r.Hold > now {
				pts = append(pts, r.Hold)
			}
		}
	}
	for _, t := range pts {
		var k, c int64
		for _, nd := range st {
			km, cm := shareUsage(nd.Res, t)
			k += km
			c += cm
		}
		if k > ShareParts || c > p.Limit {
			return false
		}
	}
	return true
}

// CheckShare reports whether Share takes req under p, as the error
// (ErrBadLease) Share would return for it at any valid time: for a caller
// that serves the call elsewhere (a Redis script) and checks it first.
func CheckShare(p Params, req ShareRequest) error {
	switch {
	case p.Interval <= 0 || p.Tolerance < p.Interval || p.Limit < 1:
		return fmt.Errorf("%w: interval %d ns, tolerance %d ns", ErrBadLease, p.Interval, p.Tolerance)
	case p.Tolerance > MaxLeaseTolerance || p.Limit > MaxShareLimit || p.Tolerance/p.Interval >= MaxShareLimit:
		return fmt.Errorf("%w: a share's funnel holds at most %d units within %d ns", ErrBadLease, int64(MaxShareLimit), int64(MaxLeaseTolerance))
	case req.Node == "":
		return fmt.Errorf("%w: a share needs a node name", ErrBadLease)
	case req.Demand < -1 || req.Demand > MaxShareDemand:
		return fmt.Errorf("%w: demand %d parts (at most %d)", ErrBadLease, req.Demand, int64(MaxShareDemand))
	case req.Lifetime < 4 || req.Lifetime > MaxShareLifetime:
		return fmt.Errorf("%w: lifetime %d µs (4 to %d)", ErrBadLease, req.Lifetime, int64(MaxShareLifetime))
	case req.Level < 0 || req.Level > p.Limit:
		return fmt.Errorf("%w: level %d units (0 to the limit %d)", ErrBadLease, req.Level, p.Limit)
	case req.Grace < 0 || req.Grace > req.Lifetime:
		return fmt.Errorf("%w: grace %d µs (0 to the lifetime)", ErrBadLease, req.Grace)
	case req.Lifetime*1000/p.Interval >= 1<<32:
		return fmt.Errorf("%w: lifetime %d µs is over 2^32 intervals", ErrBadLease, req.Lifetime)
	}
	return nil
}
