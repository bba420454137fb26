package sharemodel

import (
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/funnelrl/funnel/gcra"
)

// RateParts is the number of parts the allocator divides the rate R into:
// a grant's rate is a whole number of parts, k·R/RateParts.
const RateParts = 1 << 20

// Mutation breaks one rule of the protocol on purpose, so that the tests
// can check that the replay catches the over-admission that follows.
type Mutation int

// The mutations. Each names the rule it breaks.
const (
	// Exact is the protocol as documented: no rule broken.
	Exact Mutation = iota
	// ReleaseAtEnd releases a grant's rate and capacity at its end rather
	// than when its bucket has drained (the node still drains until then).
	ReleaseAtEnd
	// CapacityOverB splits twice the funnel's capacity among the nodes.
	CapacityOverB
	// RateOverR grants each node its water-filling target without checking
	// what the other nodes' grants still hold.
	RateOverR
	// ReplaceOnRenew forgets a node's earlier grants when it renews, in
	// the allocator (their rate and capacity are no longer reserved) and in
	// the node (which drains and admits under the newest grant only).
	ReplaceOnRenew
	// NoTruncation has the allocator end a node's older grants at a call
	// (Config.Grace) while the node goes on draining them until their
	// original hold.
	NoTruncation
	// NoClockMargin has the node read the allocator's times as its own
	// clock's, without the round trip's bounds on their difference.
	NoClockMargin
)

// String returns the mutation's name.
func (m Mutation) String() string {
	switch m {
	case Exact:
		return "exact"
	case ReleaseAtEnd:
		return "release-at-end"
	case CapacityOverB:
		return "capacity-over-B"
	case RateOverR:
		return "rate-over-R"
	case ReplaceOnRenew:
		return "replace-on-renew"
	case NoTruncation:
		return "no-truncation"
	case NoClockMargin:
		return "no-clock-margin"
	}
	return "unknown"
}

// The ways to split the capacity B among the live nodes.
const (
	// CapHalf gives half of B equally and half in proportion to the rate.
	CapHalf = iota
	// CapSqrt splits B in proportion to the square root of each node's
	// target rate: a bucket whose arrivals match its rate refuses about
	// 1/(2c) of them, so this minimises the sum of those losses.
	CapSqrt
	// CapProp splits B in proportion to the rate.
	CapProp
)

// Config is one simulation: a funnel, a fleet, its traffic and its links.
// All times are simulated nanoseconds.
type Config struct {
	// Count, Period and Burst are the funnel's limit, as gcra.NewParams
	// takes them: Count per Period, Burst+1 units at once.
	Count  int64
	Period time.Duration
	Burst  int64
	// Nodes is the fleet's size.
	Nodes int
	// Weights split the demand among the nodes (nil: equal); a node's
	// arrivals are a Poisson process of rate Factor·R·w/Σw.
	Weights []float64
	// Rotate, when positive, moves the weights one node along every Rotate
	// (node i takes node i−1's weight), so that the demand shifts.
	Rotate time.Duration
	// JoinAt, when positive, keeps the last node silent until then: it
	// joins a fleet already running, whose shares must shrink to let it in.
	JoinAt time.Duration
	// Factor is the demand as a multiple of the rate R.
	Factor float64
	// Lifetime is L, the length of a grant.
	Lifetime time.Duration
	// MaxOneWay is the largest one-way delay between a node and the
	// allocator; each way of each call takes a uniform random delay in
	// [0, MaxOneWay].
	MaxOneWay time.Duration
	// MaxOffset is the largest difference between a node's clock and the
	// allocator's; each node's is uniform in [−MaxOffset, MaxOffset].
	MaxOffset time.Duration
	// Duration is how long the simulation runs; Steady is when its steady
	// window starts (measured to the end).
	Duration, Steady time.Duration
	// Seed seeds the simulation's random numbers.
	Seed uint64
	// Headroom is the relative margin added to each reported demand before
	// water-filling.
	Headroom float64
	// Sigmas shifts each reported demand by this many standard deviations
	// of its estimate (a Poisson rate averaged over Smoothing): negative
	// values shade a share toward what the node will surely use.
	Sigmas float64
	// CapSplit chooses how the capacity B is divided (see the Cap constants).
	CapSplit int
	// CallBudget, when positive, lengthens the grants beyond Lifetime (up
	// to MaxLifetime) so that the fleet's calls are about this share of
	// its decisions: each grant lasts N/(CallBudget·Σ demand), N the live
	// nodes.
	CallBudget  float64
	MaxLifetime time.Duration
	// Shift, when positive, has a node renew early (at least L/8 after its
	// last call) when its arrivals since that call are off the demand it
	// reported by more than a factor Shift−1 of it and by more than four
	// standard deviations (of a Poisson count); it then reports their
	// rate, unsmoothed.
	Shift float64
	// Grace, when positive, has each call end the node's older grants
	// Grace after it is served: the node admits under them until Grace
	// after it sends the call, and drains under them until then plus
	// ⌈c/k⌉, so that the allocator can release them then (a node whose
	// share shrank gives it back within Grace + τ, not at its old grant's
	// end). Grace must exceed the round trip, or the node pauses.
	Grace time.Duration
	// Smoothing is the time constant of a node's demand average.
	Smoothing time.Duration
	// Mutation breaks one rule on purpose (tests only).
	Mutation Mutation
	// Check has the allocator verify, after every grant, that the
	// reservations hold at most R and B at every future instant
	// (Result.Violations counts the grants after which they did not).
	Check bool
}

// Result is what one simulation measured.
type Result struct {
	// Arrivals is the number of requests (decisions); Admitted how many
	// the fleet admitted; Exact how many one exact funnel fed the same
	// requests admitted.
	Arrivals, Admitted, Exact int64
	// Over is the number of the fleet's admissions that the replay through
	// one exact funnel refused: over-admissions, which must be 0.
	Over int64
	// Calls is the number of allocator calls; SteadyCalls those made in
	// the steady window.
	Calls, SteadyCalls int64
	// Violations is the number of grants after which the reservations
	// held more than R or B at some instant (with Config.Check).
	Violations int64
	// The steady window's counts: requests, the fleet's admissions, the
	// exact funnel's admissions, and requests the exact funnel admitted
	// but the fleet refused.
	SteadyArrivals, SteadyAdmitted, SteadyExact, SteadyMissed int64
	// SteadySeconds is the steady window's length.
	SteadySeconds float64
	// Seconds is the simulation's length.
	Seconds float64
	// R is the funnel's rate per second.
	R float64
}

// CallsPerDecision is the allocator calls per request, over the whole
// simulation.
func (r Result) CallsPerDecision() float64 { return float64(r.Calls) / float64(max(r.Arrivals, 1)) }

// SteadyCallsPerDecision is the allocator calls per request in the steady
// window.
func (r Result) SteadyCallsPerDecision() float64 {
	return float64(r.SteadyCalls) / float64(max(r.SteadyArrivals, 1))
}

// SteadyCallsPerSecond is the allocator calls per second in the steady
// window.
func (r Result) SteadyCallsPerSecond() float64 { return float64(r.SteadyCalls) / r.SteadySeconds }

// UnderVsR is the steady window's shortfall of admissions from the rate,
// as a share of the rate: 1 − admitted/(R·window).
func (r Result) UnderVsR() float64 {
	return 1 - float64(r.SteadyAdmitted)/(r.R*r.SteadySeconds)
}

// UnderVsExact is the steady window's shortfall from one exact funnel fed
// the same requests, as a share of the rate.
func (r Result) UnderVsExact() float64 {
	return float64(r.SteadyExact-r.SteadyAdmitted) / (r.R * r.SteadySeconds)
}

// MissedShare is the steady window's requests that one exact funnel
// admitted and the fleet refused, as a share of the exact funnel's
// admissions.
func (r Result) MissedShare() float64 {
	return float64(r.SteadyMissed) / float64(max(r.SteadyExact, 1))
}

// grant is the allocator's answer to one call, in the allocator's time:
// admit in [Start, End) through a bucket of rate K parts and capacity C
// (level units: one unit is RateParts·T); the rate and capacity stay
// reserved until Hold, by which a bucket full at End has drained at K.
type grant struct {
	Now, Start, End, Hold int64
	K, C                  int64
}

// reservation is a grant's hold on the rate and capacity, in the
// allocator's time.
type reservation struct {
	start, hold int64
	k, c        int64
}

// allocator is the shared state (Redis's, in the real protocol): each
// node's reservations and last reported demand.
type allocator struct {
	cfg      *Config
	lifetime int64
	capUnits int64 // B in level units
	unit     int64 // one unit in level units
	tau      int64
	interval int64
	res      [][]reservation
	demand   []float64 // units per second; +Inf when unknown
	seen     []int64   // until when each node competes: its last call plus 1.25 lifetimes

	violations int64
}

// usage returns the rate and capacity that node m's reservations hold at
// t: the largest of those live at t (one bucket per node).
func (a *allocator) usage(m int, t int64) (k, c int64) {
	for _, r := range a.res[m] {
		if r.start <= t && t < r.hold {
			k = max(k, r.k)
			c = max(c, r.c)
		}
	}
	return k, c
}

// call serves node n's call at allocator time now, reporting demand
// (units per second, +Inf when not yet measured).
func (a *allocator) call(n int, now int64, demand float64) grant {
	cfg := a.cfg
	a.demand[n] = demand
	if cfg.Grace > 0 {
		// The node stopped admitting under its older grants Grace after
		// it sent this call (before now), and drains them by then plus
		// ⌈c/k⌉: their hold ends there.
		for i, r := range a.res[n] {
			a.res[n][i].hold = min(r.hold, now+int64(cfg.Grace)+(r.c+r.k-1)/r.k)
		}
	}
	life := a.lifetime
	if cfg.CallBudget > 0 {
		// Lengthen the grants until the fleet's calls, about one per live
		// node and lifetime, are within the budget of its decisions.
		var total float64
		var nodes int
		for m, d := range a.demand {
			if m == n || now < a.seen[m] {
				if !math.IsInf(d, 1) {
					total += d
				}
				nodes++
			}
		}
		if total > 0 {
			want := float64(nodes) / (cfg.CallBudget * total) * 1e9
			life = min(max(life, int64(want)), max(int64(cfg.MaxLifetime), life))
		}
	}
	a.seen[n] = now + life + life/4 // the node competes until then
	// Prune and find the live nodes. Every reservation starts at or before
	// now, so the others' holdings only fall after now: what is free at now
	// is free over the whole new grant.
	var usedK, usedC int64
	active := []int{n}
	for m := range a.res {
		live := a.res[m][:0]
		for _, r := range a.res[m] {
			if r.hold > now {
				live = append(live, r)
			}
		}
		a.res[m] = live
		if m == n {
			continue
		}
		if len(live) > 0 || now < a.seen[m] {
			// A node that holds a grant, or called within about a
			// lifetime (its grant may have been empty): it competes.
			active = append(active, m)
		}
		k, c := a.usage(m, now)
		usedK += k
		usedC += c
	}
	R := 1e9 / float64(a.interval) // units per second
	targets := waterfill(a, active, R)
	kT := int64(targets[0] / R * RateParts)
	kT = min(max(kT, 0), RateParts)
	// Capacity: split among the live nodes by their targets (see the Cap
	// constants); no more than the bucket drains in the longer of τ and L,
	// and at least one unit.
	var share float64
	switch cfg.CapSplit {
	case CapHalf:
		share = 0.5/float64(len(active)) + 0.5*float64(kT)/RateParts
	case CapSqrt:
		var sum float64
		for _, x := range targets {
			sum += math.Sqrt(x)
		}
		share = math.Sqrt(targets[0]) / sum
	case CapProp:
		share = float64(kT) / RateParts
	}
	cT := int64(share * float64(a.capUnits))
	drainCap := kT * max(a.tau, a.lifetime) // level units drained in that time
	if math.IsInf(demand, 1) {
		// A node whose demand is not yet measured takes at most a quarter
		// of R, and a capacity that drains within its short grant, so
		// that the first caller of a cold key does not hold the whole
		// funnel for τ while the others start.
		kT = min(kT, RateParts/4)
		drainCap = kT * (a.lifetime / 4)
	}
	cT = max(min(cT, drainCap), a.unit)
	if cfg.Mutation == CapacityOverB {
		cT = 2 * a.capUnits / int64(len(active))
	}
	k, c := kT, cT
	if cfg.Mutation != RateOverR && cfg.Mutation != CapacityOverB {
		k = min(k, RateParts-usedK)
		c = min(c, a.capUnits-usedC)
	}
	kD := kT // the node's own (shaded) demand, in parts
	if !math.IsInf(demand, 1) {
		kD = min(kT, int64(shaded(a.cfg, demand)/R*RateParts))
	}
	if math.IsInf(demand, 1) || k*10 < kD*8 {
		// Demand not yet measured, or the others still hold more than a
		// fifth of what this node needs: come back sooner.
		life /= 4
	}
	if k <= 0 || c < a.unit {
		k, c = 0, 0
	}
	g := grant{Now: now, Start: now, End: now + life, K: k, C: c}
	g.Hold = g.End
	if k > 0 {
		g.Hold += (c + k - 1) / k
	}
	hold := g.Hold
	if cfg.Mutation == ReleaseAtEnd {
		hold = g.End
	}
	if cfg.Mutation == ReplaceOnRenew {
		a.res[n] = a.res[n][:0]
	}
	if k > 0 {
		a.res[n] = append(a.res[n], reservation{start: g.Start, hold: hold, k: k, c: c})
	}
	if cfg.Check && !a.holds(now) {
		a.violations++
	}
	return g
}

// holds reports whether, at every instant from now on, the nodes'
// reservations (each node's largest live one) add up to at most R and B.
// The sums only change where a reservation starts or ends.
func (a *allocator) holds(now int64) bool {
	pts := []int64{now}
	for _, rs := range a.res {
		for _, r := range rs {
			if r.start > now {
				pts = append(pts, r.start)
			}
			if r.hold > now {
				pts = append(pts, r.hold)
			}
		}
	}
	for _, t := range pts {
		var k, c int64
		for m := range a.res {
			km, cm := a.usage(m, t)
			k += km
			c += cm
		}
		if k > RateParts || c > a.capUnits {
			return false
		}
	}
	return true
}

// waterfill returns the live nodes' target rates (units per second): the
// max-min fair division of R among their demands (each shifted by the
// margins), with whatever the demands leave split equally.
func waterfill(a *allocator, active []int, R float64) []float64 {
	d := make([]float64, len(active))
	for i, m := range active {
		d[i] = shaded(a.cfg, a.demand[m])
	}
	sorted := append([]float64(nil), d...)
	sort.Float64s(sorted)
	left := R
	level := math.Inf(1)
	for i, x := range sorted {
		rest := float64(len(sorted) - i)
		if x*rest >= left {
			level = left / rest
			left = 0
			break
		}
		left -= x
	}
	extra := left / float64(len(d)) // all demands met: split the rest
	for i := range d {
		d[i] = min(d[i], level) + extra
	}
	return d
}

// shaded returns a reported demand (units per second) shifted by the
// configured margins; an unknown demand (+Inf) stays unknown.
func shaded(cfg *Config, x float64) float64 {
	if math.IsInf(x, 1) {
		return x
	}
	sd := math.Sqrt(x / (2 * cfg.Smoothing.Seconds()))
	return max(x*(1+cfg.Headroom)+cfg.Sigmas*sd, 0)
}

// localGrant is a grant as node reads it on its own clock: it admits in
// [admitFrom, admitTo) and drains at k until drainTo, where these hold
// whatever the node's clock's offset within the call's bounds.
type localGrant struct {
	admitFrom, admitTo, drainTo int64
	k, c                        int64
}

// node is one process of the fleet.
type node struct {
	offset   int64 // local = allocator + offset
	grants   []localGrant
	level    int64 // level units, at levelAt (local)
	levelAt  int64
	inFlight bool
	sentAt   int64 // local time of the call in flight
	renewAt  int64 // local time of the next renewal
	renewSeq int64 // the renewal timer's event
	// demand measurement
	count    int64 // arrivals since the last report
	reportAt int64 // local time of the last report
	demand   float64
	measured bool
	everSent bool
	reported float64 // the demand of the last call
}

// drainTo brings the level to local time x: it falls at the largest rate
// among the grants that surely hold at each instant.
func (nd *node) drainTo(x int64) {
	u := nd.levelAt
	if x <= u {
		return
	}
	nd.levelAt = x
	if nd.level == 0 {
		return
	}
	// Breakpoints within (u, x).
	var pts [16]int64
	ps := pts[:0]
	ps = append(ps, u, x)
	for _, g := range nd.grants {
		for _, p := range [2]int64{g.admitFrom, g.drainTo} {
			if p > u && p < x {
				ps = append(ps, p)
			}
		}
	}
	if len(ps) > 2 {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	}
	for i := 0; i+1 < len(ps) && nd.level > 0; i++ {
		a, b := ps[i], ps[i+1]
		var k int64
		for _, g := range nd.grants {
			if g.admitFrom <= a && b <= g.drainTo {
				k = max(k, g.k)
			}
		}
		nd.level = max(nd.level-k*(b-a), 0)
	}
}

// capacityAt is the largest capacity of the grants that surely admit at
// local time x (0 when none does).
func (nd *node) capacityAt(x int64) int64 {
	var c int64
	for _, g := range nd.grants {
		if g.admitFrom <= x && x < g.admitTo {
			c = max(c, g.c)
		}
	}
	return c
}

// The kinds of event.
const (
	callEvent  = iota // a call reaches the allocator
	replyEvent        // its reply reaches the node
	renewEvent        // a node's renewal timer fires
)

// event is a call reaching the allocator, its reply reaching a node, or a
// node's renewal timer.
type event struct {
	at   int64 // allocator (true) time
	seq  int64
	node int
	kind int // callEvent, replyEvent or renewEvent
	g    grant
	dem  float64
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// ErrConfig is returned by Run for a configuration it cannot simulate.
var ErrConfig = errors.New("sharemodel: invalid configuration")

// Run simulates one configuration and replays every admission through one
// exact funnel.
func Run(cfg Config) (Result, error) {
	p, err := gcra.NewParams(cfg.Burst, cfg.Count, cfg.Period)
	if err != nil {
		return Result{}, err
	}
	if cfg.Nodes < 1 || cfg.Factor <= 0 || cfg.Lifetime <= 0 || cfg.Duration <= cfg.Steady ||
		(cfg.Weights != nil && len(cfg.Weights) != cfg.Nodes) {
		return Result{}, ErrConfig
	}
	if cfg.Smoothing <= 0 {
		cfg.Smoothing = 2 * cfg.Lifetime
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	T := p.Interval
	R := 1e9 / float64(T)
	a := &allocator{
		cfg:      &cfg,
		lifetime: int64(cfg.Lifetime),
		unit:     RateParts * T,
		capUnits: RateParts * T * p.Limit,
		tau:      p.Tolerance,
		interval: T,
		res:      make([][]reservation, cfg.Nodes),
		demand:   make([]float64, cfg.Nodes),
		seen:     make([]int64, cfg.Nodes),
	}
	nodes := make([]node, cfg.Nodes)
	for i := range nodes {
		if cfg.MaxOffset > 0 {
			nodes[i].offset = rng.Int64N(2*int64(cfg.MaxOffset)+1) - int64(cfg.MaxOffset)
		}
	}
	weights := cfg.Weights
	if weights == nil {
		weights = make([]float64, cfg.Nodes)
		for i := range weights {
			weights[i] = 1
		}
	}
	oneWay := func() int64 {
		if cfg.MaxOneWay <= 0 {
			return 0
		}
		return rng.Int64N(int64(cfg.MaxOneWay) + 1)
	}
	wsum, wsumEarly := sum(weights), sum(weights[:len(weights)-1])
	lambda := cfg.Factor * R / 1e9 // arrivals per ns
	var q events
	var seq int64
	var res Result
	res.R = R
	res.Seconds = cfg.Duration.Seconds()
	res.SteadySeconds = (cfg.Duration - cfg.Steady).Seconds()
	var replayTAT, exactTAT int64
	const epoch = int64(1) << 40 // keeps times positive with offsets
	now := epoch
	end := epoch + int64(cfg.Duration)
	steady := epoch + int64(cfg.Steady)
	nextArrival := now + int64(rng.ExpFloat64()/lambda)
	margin := 2*int64(2*cfg.MaxOneWay) + int64(100*time.Microsecond)

	send := func(n int, t int64, shifted bool) {
		nd := &nodes[n]
		x := t + nd.offset
		dem := math.Inf(1)
		if cfg.Grace > 0 {
			// Older grants end Grace after this call is sent.
			for i, g := range nd.grants {
				nd.grants[i].admitTo = min(g.admitTo, x+int64(cfg.Grace))
				if cfg.Mutation != NoTruncation {
					nd.grants[i].drainTo = min(g.drainTo, x+int64(cfg.Grace)+(g.c+g.k-1)/g.k)
				}
			}
		}
		if nd.everSent {
			if span := x - nd.reportAt; span > 0 {
				inst := float64(nd.count) / (float64(span) / 1e9)
				if !nd.measured || shifted {
					nd.demand = inst
					nd.measured = true
				} else {
					w := 1 - math.Exp(-float64(span)/float64(cfg.Smoothing))
					nd.demand += w * (inst - nd.demand)
				}
			}
			if nd.measured {
				dem = nd.demand
			}
		}
		nd.reported = dem
		nd.everSent = true
		nd.count = 0
		nd.reportAt = x
		nd.inFlight = true
		nd.sentAt = x
		res.Calls++
		if t >= steady {
			res.SteadyCalls++
		}
		seq++
		heap.Push(&q, event{at: t + oneWay(), seq: seq, node: n, dem: dem})
	}

	for {
		// The next event: an arrival or a protocol message.
		if len(q) > 0 && q[0].at <= nextArrival {
			ev := heap.Pop(&q).(event)
			if ev.at >= end {
				break
			}
			now = ev.at
			switch ev.kind {
			case callEvent:
				g := a.call(ev.node, now, ev.dem)
				seq++
				heap.Push(&q, event{at: now + oneWay(), seq: seq, node: ev.node, kind: replyEvent, g: g})
				continue
			case renewEvent:
				// Renew ahead of the grant's end, if the node had requests
				// since its last call; otherwise the grant lapses.
				if nd := &nodes[ev.node]; !nd.inFlight && nd.count > 0 && nd.renewSeq == ev.seq {
					send(ev.node, now, false)
				}
				continue
			}
			nd := &nodes[ev.node]
			r := now + nd.offset // received, local
			s := nd.sentAt
			nd.inFlight = false
			g := ev.g
			// The allocator's time t reads, on this clock, somewhere in
			// [t+s−n, t+r−n].
			lo, hi := s-g.Now, r-g.Now
			if cfg.Mutation == NoClockMargin {
				lo, hi = 0, 0
			}
			nd.drainTo(r)
			// Forget grants whose drain has ended.
			live := nd.grants[:0]
			for _, lg := range nd.grants {
				if lg.drainTo > r && cfg.Mutation != ReplaceOnRenew {
					live = append(live, lg)
				}
			}
			nd.grants = live
			if g.K > 0 {
				nd.grants = append(nd.grants, localGrant{
					admitFrom: g.Start + hi, admitTo: g.End + lo, drainTo: g.Hold + lo,
					k: g.K, c: g.C,
				})
			}
			nd.renewAt = s + (g.End - g.Now) - margin
			seq++
			nd.renewSeq = seq
			heap.Push(&q, event{at: max(nd.renewAt-nd.offset, now), seq: seq, node: ev.node, kind: renewEvent})
			continue
		}
		t := nextArrival
		if t >= end {
			break
		}
		now = t
		nextArrival = t + 1 + int64(rng.ExpFloat64()/lambda)
		// Which node.
		u, ws, total := rng.Float64(), weights, wsum
		if t-epoch < int64(cfg.JoinAt) {
			ws, total = weights[:len(weights)-1], wsumEarly // the last node has not joined
		}
		n := pickNode(u*total, ws, cfg.Rotate, t-epoch)
		nd := &nodes[n]
		x := t + nd.offset
		nd.count++
		if !nd.inFlight && x >= nd.renewAt {
			// A node without a live grant (its first request, or its
			// grant lapsed) calls at once.
			send(n, t, false)
		} else if cfg.Shift > 0 && !nd.inFlight && nd.measured && x-nd.reportAt >= a.lifetime/8 && nd.count >= 8 {
			// Renew early when the demand has shifted.
			// Its count since the last call is off the reported demand by
			// more than the factor and than four standard deviations of a
			// Poisson count.
			want := nd.reported * float64(x-nd.reportAt) / 1e9
			dev := math.Abs(float64(nd.count) - want)
			if dev > (cfg.Shift-1)*want && dev > 4*math.Sqrt(want) {
				send(n, t, true)
			}
		}
		nd.drainTo(x)
		admit := false
		if c := nd.capacityAt(x); c > 0 && nd.level+a.unit <= c {
			admit = true
			nd.level += a.unit
		}
		res.Arrivals++
		ex, er, _ := gcra.Decide(t, exactTAT, p, 1)
		if er.Allowed {
			exactTAT = ex
			res.Exact++
		}
		if admit {
			res.Admitted++
			tat, r, _ := gcra.Decide(t, replayTAT, p, 1)
			if r.Allowed {
				replayTAT = tat
			} else {
				res.Over++
			}
		}
		if t >= steady {
			res.SteadyArrivals++
			if admit {
				res.SteadyAdmitted++
			}
			if er.Allowed {
				res.SteadyExact++
				if !admit {
					res.SteadyMissed++
				}
			}
		}
	}
	res.Violations = a.violations
	return res, nil
}

func sum(w []float64) float64 {
	var s float64
	for _, x := range w {
		s += x
	}
	return s
}

// pickNode maps u in [0, Σw) to a node by weight, the weights moved
// elapsed/rotate places along when rotate is positive.
func pickNode(u float64, w []float64, rotate time.Duration, elapsed int64) int {
	shift := 0
	if rotate > 0 {
		shift = int(elapsed/int64(rotate)) % len(w)
	}
	for i, x := range w {
		if u < x {
			return (i + shift) % len(w)
		}
		u -= x
	}
	return (len(w) - 1 + shift) % len(w)
}
