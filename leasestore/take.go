package leasestore

import (
	"context"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// entry is a key's leases and what the store knows of its shared state.
// Its fields are guarded by its shard's lock.
type entry struct {
	key string      // a copy: the caller's may alias a buffer it reuses
	p   gcra.Params // the funnel's own parameters, which the state is for
	// leases holds the key's leases (their ends are the key's TAT after
	// each grant).
	leases leases
	// back is the unspent tail of the newest lease once it expired, for
	// the next call to give back.
	back gcra.LeaseRequest
	// refusedUntil is the local time before which no request of at least
	// refusedQ units can be admitted (a lease call found no room), and
	// callAt the local time before which no lease call can get them (a
	// lease takes units up to its horizon ahead).
	refusedUntil, refusedQ, callAt int64
	// size is the units the next lease asks for; spentOut says the newest
	// lease was spent before it expired.
	size     int64
	spentOut bool
	// ahead is how far the key's TAT was ahead of Redis's time at the last
	// call (0 for a full bucket), and at the local time of that call's
	// answer (0 before the first).
	ahead, at int64
	// lead is how far the key's TAT was ahead of Redis's time before the
	// last call's grant (once its give-back applied), which its units'
	// lifetimes were extended by (see extension), and which left room for
	// units at once when under the reduced tolerance.
	lead int64
	// flight is the lease call in flight for the key, if any.
	flight *flight
	// nodes is the number of nodes that leased the key lately, as the last
	// call counted them (0: not counted); the key's lease is at most its
	// share of the reduced burst.
	nodes int64
	// last is the local time of the last call's answer, spentSince the
	// units spent here since, and rate the units per ns between the two
	// calls before: the prefetch's measure of the key. askedSince and
	// demand are the same for the units asked for, admitted or not: the
	// key's demand here, which sizes its leases under contention.
	last, spentSince, askedSince int64
	rate, demand                 float64
	// disp is the index of dispersion of the key's requests here (the
	// variance of their count between two calls over its mean, 1 for
	// Poisson arrivals), a moving average from 1.
	disp float64
	// used is the local time of the key's last decision, for the sweeper.
	used int64
	// window is the local time a cold key's current window began, and
	// count its decisions since.
	window, count int64
	// resets counts the Resets of the key through this store: a lease
	// call begun before one forfeits what it brings.
	resets int64
	// reduced is the funnel the key is leased under, and lk its leases'
	// lifetime (KeyLifetime): the tolerance it gave up.
	reduced gcra.Params
	lk      int64
	// lead0 is the lead before the grant before the last, and leads the
	// grants that set lead and lead0 (at most 2).
	lead0, leads int64
	// cmd marks a key of Redis's GCRA command (see Store.GCRA): its leases
	// are the command's (redisstore.Store.LeaseGCRA), in microseconds on
	// Redis's time in whole milliseconds; p and reduced are its funnel in
	// ns. skew is the part of lk its units are not spent in: the
	// command's time is up to a millisecond before the call ran.
	cmd  bool
	skew int64
}

// flight is one lease call, which the decisions that need units wait for.
type flight struct {
	done   chan struct{}
	resets int64 // the entry's resets when it began
}

// take decides q units of key under p, leased under r (p reduced).
func (s *Store) take(ctx context.Context, key string, p, r gcra.Params, q int64, res *funnel.Result) error {
	sh := s.shard(key)
	asked := false
	return decide(s, ctx, sh, q, res, func(now int64) funnelLane {
		e := s.entryOf(sh, key, p, r, false, now)
		if !asked {
			e.askedSince += q
			asked = true
		}
		e.used = now
		s.expire(e, now)
		return funnelLane{s: s, e: e, key: key, r: r, now: now}
	})
}

// entryOf returns key's entry on sh for the funnel p leased under r (a
// GCRA command's key when cmd), made afresh when there is none or its
// limit changed. sh's lock is held.
func (s *Store) entryOf(sh *shard, key string, p, r gcra.Params, cmd bool, now int64) *entry {
	e := sh.keys[key]
	if e == nil || e.p != p || e.cmd != cmd {
		if e != nil {
			s.forfeit(e) // the limit changed: start afresh
		}
		e = &entry{key: strings.Clone(key), p: p, reduced: r, lk: p.Tolerance - r.Tolerance, size: 1, last: now, cmd: cmd, disp: 1}
		if cmd {
			e.skew = commandSkew
		}
		sh.keys[e.key] = e
	}
	return e
}

// warm is the number of decisions of a key, within one lifetime, that
// make it lease: fewer go to the store one by one, where the store
// batches them with others (a lease call is a round trip of its own).
const warm = 8

// cold reports whether e's key is cold here: it holds nothing, and fewer
// than warm of its decisions came within the current lifetime-long window.
// A cold key's decision goes to the store as a plain decision under the
// reduced funnel (see direct). Once warm, the key leases, its first lease
// as large as its decisions in the window (its rate times the lifetime).
// e's shard lock is held.
//
// Under contention (the last call or decision here found no room for one
// more unit) a key that holds nothing is cold while its demand here (see
// want) is under warm decisions per L_k, however warm it was before: its
// lease would be future-dated units that a few decisions per lifetime may
// not reach before their time ends, their slots then lost to every node,
// while in the store its decisions are exact. (16 nodes at 10 decisions a
// second each on 100/s, leased for 200 ms: about 80/s admitted in steady
// state with leases, about 98/s with this rule.) And one that holds nothing
// under contention with at least warm decisions per L_k is warm, whatever
// its share of the burst.
func (s *Store) cold(e *entry, now int64) bool {
	held := e.leases.n > 0 || e.back.BackUnits > 0
	if !held && e.at != 0 && e.ahead+e.reduced.Interval > e.reduced.Tolerance {
		// Its demand here (between its last two calls, or since it was
		// first seen): at least warm decisions per L_k.
		a := e.demand
		if a == 0 && now > e.last {
			a = float64(e.askedSince) / float64(now-e.last)
		}
		if a*float64(e.lk) < float64(s.warm) {
			return true
		}
		// In demand: it leases future-dated units, which its demand
		// sizes (see want), even where its share of the burst among the
		// nodes is under two units (maxLease 1: 16 nodes on a burst of
		// 10), which would keep it cold below: each of its decisions a
		// call, one per refusal's RetryAfter under overload.
		return false
	}
	return coldAt(&e.size, &e.window, &e.count, held, now, s.lifetime, s.maxLease(e, e.nodes), s.warm)
}

// direct decides q units of a cold key in the store, as a plain decision
// under the reduced funnel r: the same admission as a lease of q units
// spent at once (the unit is spent when it is debited, so the lifetime
// does not come into it), but through the store's batched path, with the
// store's exact result, and nothing held after it.
func (s *Store) direct(ctx context.Context, key string, e *entry, r gcra.Params, q int64, res *funnel.Result) error {
	if done, err := s.decideDirect(ctx, key, &funnel.Checked{GCRA: r}, q, res); done {
		return err
	}
	sh := s.shard(key)
	sh.mu.Lock()
	if sh.keys[key] == e {
		// How far the funnel is taken ahead, which tells a lease that
		// follows whether the key is contended.
		now := s.now()
		e.ahead, e.at = int64(res.ResetAfter), now
		if !res.Allowed && res.RetryAfter > 0 {
			e.refusedUntil, e.refusedQ = satAdd(now, int64(res.RetryAfter)), q
			e.callAt = e.refusedUntil
		}
	}
	sh.mu.Unlock()
	if res.Allowed {
		s.stats.spent.Add(q)
	}
	return nil
}

// decideDirect sends one take of q units of key under c to the store, and
// reports true when that is the whole answer: an error, or the store's
// fallback.
func (s *Store) decideDirect(ctx context.Context, key string, c *funnel.Checked, q int64, res *funnel.Result) (bool, error) {
	s.stats.direct.Add(1)
	var err error
	*res, err = s.do1(ctx, funnel.OpTake, key, c, q)
	if err != nil {
		*res = funnel.Result{}
		return true, err
	}
	if res.Fallback {
		s.stats.fallbacks.Add(1)
		return true, nil
	}
	return false, nil
}

// oneOp is the buffers of one op sent to the Backend, pooled: slices
// passed through the Backend interface escape.
type oneOp struct {
	ops [1]funnel.Op
	res [1]funnel.Result
}

var oneOps = sync.Pool{New: func() any { return new(oneOp) }}

// do1 runs one op of kind and n units of key under c in the Backend.
func (s *Store) do1(ctx context.Context, kind funnel.OpKind, key string, c *funnel.Checked, n int64) (funnel.Result, error) {
	b := oneOps.Get().(*oneOp)
	b.ops[0] = funnel.Op{Kind: kind, Key: key, N: n, Limit: *c}
	err := s.b.Do(ctx, b.ops[:], b.res[:])
	r := b.res[0]
	b.ops[0] = funnel.Op{} // keep no key nor time zone alive
	oneOps.Put(b)
	return r, err
}

// spend takes q units available at now from e's leases, the older first.
func (s *Store) spend(e *entry, q, now int64) {
	s.stats.spent.Add(q)
	e.spentSince += q
	if e.leases.spend(q, now) {
		e.spentOut = true // the newest, spent before it expired
	}
}

// expire drops the leases of e whose units have all ended or been spent.
// The newest one's unspent tail (the units after the last one spent) is
// kept in e.back, for the next call to give back: those are the last
// units the funnel debited, so that giving them back is the same as never
// having taken them. Units passed over before a spent one, and an older
// lease's, cannot go back (later units followed them) and are forfeited.
func (s *Store) expire(e *entry, now int64) {
	for e.leases.n > 0 && e.leases.b[0].first(now) >= e.leases.b[0].n {
		l := e.leases.b[0]
		tail := l.n - l.last
		if e.leases.n == 1 && tail > 0 {
			if e.back.BackUnits > 0 {
				s.stats.forfeited.Add(e.back.BackUnits)
			}
			e.back = gcra.LeaseRequest{BackEnd: l.end, BackUnits: tail}
			if 2*tail > l.n {
				e.size = max(1, e.size/2) // most of it went unspent
			}
			s.stats.forfeited.Add(l.n - l.used - tail)
		} else {
			s.stats.forfeited.Add(l.n - l.used)
		}
		e.leases.drop()
	}
}

// forfeit drops all of e's leases and its pending give-back.
func (s *Store) forfeit(e *entry) {
	s.stats.forfeited.Add(e.leases.clear())
	s.stats.forfeited.Add(e.back.BackUnits)
	e.back = gcra.LeaseRequest{}
	e.size = 1
}

// maxLease is the most units one lease of e's key may ask for while the
// funnel has room: what its rate gives in a lifetime (R·L_k), and its
// share of the reduced burst among nodes.
func (s *Store) maxLease(e *entry, nodes int64) int64 {
	r := e.reduced
	c := max(1, min(e.lk/r.Interval, r.Limit/max(nodes, 1)))
	if s.opts.MaxLease > 0 {
		c = min(c, s.opts.MaxLease)
	}
	return c
}

// extension is how much longer than the key's lifetime L_k the units of
// a grant of e's key live, when the funnel's TAT before the grant was
// ahead ns ahead of Redis's time (once the give-back applied; the
// grant's end less its units): unit j of the grant (0 for the first)
// lives min(ext+j·T, most) longer, with ext = min(ahead, most) and most =
// min(τ'−T, L−L_k) (τ' the reduced tolerance r.Tolerance, T the interval,
// L the store's lifetime): the funnel's TAT before unit j, ahead+j·T
// ahead of the grant's time, less its slot. So under contention a smooth
// limit's units live up to min(L, τ−T) after their slots instead of L_k,
// and the units of a grant end one interval apart, whether they fitted at
// once or were future-dated, at no cost to the funnel: a unit's time after
// its slot is paid by the part of the funnel already taken ahead of it
// (see the package doc's proof). A key whose L_k is the store's lifetime
// is not extended (most is 0).
func (s *Store) extension(e *entry, r gcra.Params, ahead int64) (ext, most int64) {
	most = max(min(r.Tolerance-r.Interval, s.lifetime-e.lk), 0)
	if s.extendAlways {
		ahead = most
	}
	if s.extendPastTolerance {
		most = max(s.lifetime-e.lk, 0)
	}
	return max(0, min(ahead, most)), most
}

// horizon is how far ahead of Redis's time a lease may take
// future-dated units: two store lifetimes, so that each node can hold its
// current lease and the next one of its share (see want).
func (s *Store) horizon() int64 { return 2 * s.lifetime }

// want is the units e's next lease asks for: its size (which doubles and
// halves, up to maxLease), but no more than fitted at once at the last
// call or decision in the store (1 when that was over a lifetime ago) nor
// than its measured demand spends within their lifetime, or its demand
// here when that is more: the units it spends before each ends
// (spendable, from the funnel's lead before the last two grants while it
// is recent, which extends their lives, less the lease calls' average
// duration, in which no unit is spent; at most the units asked for in
// half a store lifetime, scaled by 1/(1−a·T)), because a grant's units
// end one interval apart, faster than a node that has less than the whole
// rate spends them, and each must be spent within its lifetime after its
// slot. The demand is capped by the node's share of a lifetime of the
// rate (R·L/nodes), so that under contention every node takes about one
// lease per lifetime, the Redis calls on a key are bounded by the fleet
// and the lifetime, and a node with more demand gets its units more often
// (its leases run out sooner) rather than in larger blocks; and by
// MaxLease.
func (s *Store) want(e *entry, now int64) int64 {
	w := e.size
	r := e.reduced
	if e.at == 0 || now-e.at > s.lifetime {
		w = 1 // the funnel's state is not known: the demand sizes it
	} else {
		// At most the units that fitted at once at the last call (or
		// decision in the store): units beyond them are future-dated,
		// which only the demand sizes.
		w = min(w, max(r.Tolerance-e.ahead, 0)/r.Interval)
	}
	a := e.demand
	if a == 0 && now > e.last {
		// A key just warm: its demand since it was first seen here.
		a = float64(e.askedSince) / float64(now-e.last)
	}
	if a > 0 {
		// How far the funnel is expected ahead of Redis's time before
		// the next grant, which extends its units' lifetimes (see
		// extension): the lesser of the last two grants' leads, which
		// vary with the other nodes' leases, while they are recent. A
		// key's first two leases are sized as if every unit were
		// future-dated and lived L_k.
		lead := int64(-1)
		if e.leads >= 2 && e.at != 0 && now-e.at <= s.lifetime {
			lead = min(e.lead, e.lead0)
		}
		// A unit is spendable from the call's answer until its request
		// was sent plus its lifetime: the call's duration is lost. So is
		// the time this node takes to spend the units it still holds
		// (spent first), as far as the next lease's units mature before
		// it: near the limit, when the funnel is little ahead, its first
		// units would end while the node still spends the last lease.
		lost := s.rtt.Load()
		if held := e.leases.live(now); held > 0 {
			// The next lease's first slot, from now, if the funnel's
			// lead stays what the last call found: under overload
			// (other nodes' leases keep it ahead) it is far, and
			// nothing is lost.
			first := int64(0)
			if e.at != 0 {
				first = max(e.ahead-r.Tolerance, 0)
			}
			lost = max(lost, int64(float64(held)/a)-first)
		}
		u := min(a*float64(r.Interval), 0.5)
		// At most the units asked for in half a store lifetime (scaled
		// as below), so that at twice the rate the fleet's leases queue
		// within the horizon of future-dated units (2L): a key whose
		// units live L would otherwise take them past it.
		var full float64
		if lead < 0 {
			// As if every unit were future-dated, each living L_k.
			full = demandUnits(a*float64(max(e.lk-lost, 0)), u, e.disp)
		} else {
			_, most := s.extension(e, r, 0)
			full = spendable(a, u, e.disp, float64(lost), float64(lead), float64(e.lk), float64(most), float64(r.Tolerance), float64(r.Interval))
		}
		full = min(full, 1<<52)
		d := min(full, a*float64(s.lifetime)/2/(1-u))
		share := max(s.maxLease(e, e.nodes), s.lifetime/r.Interval/max(e.nodes, 1))
		if e.demand > 0 {
			// The size (units that fit at once) is no more than the
			// measured demand spends within their lifetime either: a
			// node with a small share of the demand near the limit
			// would otherwise lose its lease's tail (the give-back of
			// which fails once another node has leased since).
			w = min(w, int64(math.Ceil(full)))
		}
		w = max(w, min(int64(math.Ceil(d)), share))
	}
	if s.opts.MaxLease > 0 {
		w = min(w, s.opts.MaxLease)
	}
	return max(w, 1)
}

// spendable is the units of one lease that a node whose demand is a per
// ns (u = a·T, at most 1/2, and disp its index of dispersion) spends
// before each ends, when it can begin lost ns after the lease's first
// slot and the funnel is lead ahead of Redis's time before it: unit j's
// slot is max(0, y+T−τ') after the grant (y = lead+j·T, τ' the reduced
// tolerance tol), its life lk plus its extension min(y, most) (see
// extension), so it ends lk + min(y, most) + max(0, y+T−τ') after the
// grant: one interval after the unit before it, but for the units at once
// beyond the extension's reach (y from most to τ'−T), which end together.
// A node spends k units in about k/a from the first slot (plus the spread
// of its arrivals, see demandUnits), slower than they end, so that k
// units are spent in time when the last of them is.
func spendable(a, u, disp, lost, lead, lk, most, tol, T float64) float64 {
	// Units 0 to k1−1 end one interval apart from lk+lead, k1 to k2−1
	// at lk+most together, and from k2 on one interval apart from
	// lk+most+lead+(k2+1)·T−τ'.
	k1 := max(math.Floor((most-lead)/T)+1, 0)
	k2 := max(math.Floor((tol-T-lead)/T)+1, k1)
	runs := [3]struct{ lo, hi, life, u float64 }{
		{0, k1, lk + lead - T, u},
		{k1, k2, lk + most, 0},
		{k2, math.Inf(1), lk + most + min(lead-tol, -T), u},
	}
	k := 0.0
	for _, r := range runs {
		if r.lo >= r.hi {
			continue
		}
		if c := demandUnits(a*max(r.life-lost, 0), r.u, disp); c > r.lo {
			k = max(k, min(c, r.hi))
		}
	}
	return k
}

// demandMargin is the standard deviations of a node's arrivals that a
// lease sized by its demand leaves room for (see demandUnits).
const demandMargin = 2

// demandUnits is the units that a node whose demand brings m requests in
// its units' lifetime (a·ℓ, a the demand per ns) spends from one lease of
// future-dated units, each spendable for ℓ from its slot, one interval
// after the one before, with u = a·T (at most 1/2): k units take k/a to
// spend, and the last ends ℓ+(k−1)·T after the first's slot, so that
// about k·(1−u) ≤ a·ℓ. Arrivals spread around their rate take k/a ± √(D·k)/a
// for k requests (D their index of dispersion: 1 for random, Poisson,
// arrivals, 0 for evenly paced ones), so that
// k·(1−u) + demandMargin·√(D·k) ≤ a·ℓ keeps a lease's last units from
// ending unspent, which the fleet would lose.
func demandUnits(m, u, disp float64) float64 {
	z := demandMargin * math.Sqrt(max(disp, 0))
	q := (-z + math.Sqrt(z*z+4*(1-u)*m)) / (2 * (1 - u))
	return q * q
}

// start begins a lease call on e for at least need units. e's shard lock
// is held.
func (s *Store) start(e *entry, r gcra.Params, need, now int64) (*flight, gcra.LeaseRequest) {
	if e.spentOut {
		e.size = min(2*e.size, s.maxLease(e, e.nodes))
		e.spentOut = false
	}
	req := e.back
	req.Want, req.Min, req.Horizon = max(s.want(e, now), need), need, s.horizon()
	e.back = gcra.LeaseRequest{}
	f := &flight{done: make(chan struct{}), resets: e.resets}
	e.flight = f
	return f, req
}

// prefetchAt is the units held at which a key's next lease is asked for
// in the background: what the key spends here in about two lease round
// trips (its rate since the last call times twice the round trip's
// average), at least one and at most half a lease.
func (s *Store) prefetchAt(e *entry, now int64) int64 {
	n := int64(math.Ceil(e.rate * 2 * float64(s.rtt.Load())))
	return min(max(n, 1), s.want(e, now)/2)
}

// noteRTT folds the duration of one lease call into the store's average
// (a moving average weighing the last call 1/8).
func (s *Store) noteRTT(d int64) {
	for {
		old := s.rtt.Load()
		n := d
		if old > 0 {
			n = old + (d-old)/8
		}
		if s.rtt.CompareAndSwap(old, n) {
			return
		}
	}
}

// maybePrefetch starts a lease call in the background when a hot key's
// units run low. e's shard lock is held.
func (s *Store) maybePrefetch(e *entry, r gcra.Params, now int64) {
	if s.opts.NoPrefetch || e.flight != nil || e.size < 4 && e.demand == 0 || e.leases.n > 1 || e.leases.live(now) > s.prefetchAt(e, now) {
		return
	}
	if e.spentOut {
		return // its next call doubles the size: let a decision make it
	}
	f, req := s.start(e, r, 1, now)
	s.stats.prefetches.Add(1)
	s.prefetchs.Add(1)
	go func() {
		defer s.prefetchs.Done()
		s.call(context.Background(), e.key, e, r, f, req, 1, now)
	}()
}

// call makes the lease call of flight f for e, sent at local time sent,
// and applies its answer: a new lease, or a refusal remembered until its
// RetryAfter, or errFailed.
func (s *Store) call(ctx context.Context, key string, e *entry, r gcra.Params, f *flight, req gcra.LeaseRequest, need, sent int64) error {
	s.stats.calls.Add(1)
	s.stats.givenBack.Add(req.BackUnits)
	g, err := s.lease(ctx, key, e, r, req)
	s.noteRTT(s.now() - sent)
	sh := s.shard(key)
	sh.mu.Lock()
	defer func() {
		e.flight = nil
		close(f.done)
		sh.mu.Unlock()
	}()
	if err != nil {
		return s.failed(ctx, key, err)
	}
	now := s.now()
	e.ahead, e.at = max(g.TAT-g.Now, 0), now
	e.nodes = g.Nodes
	// The key's local rate and demand since the call before, for the
	// prefetch and the lease's size.
	if e.last > 0 && now > e.last {
		e.rate = float64(e.spentSince) / float64(now-e.last)
		dt := float64(now - e.last)
		d := float64(e.askedSince) / dt
		if x := e.demand * dt; x >= 1 {
			// The spread of the requests counted against the ones
			// the demand expected: Poisson arrivals give 1.
			v := float64(e.askedSince) - x
			e.disp += (min(v*v/x, 4) - e.disp) / 4
		}
		if e.demand > 0 {
			d = (e.demand + d) / 2 // smoothed: a lease sized on a burst is forfeited
		}
		e.demand = d
	}
	e.last, e.spentSince, e.askedSince = now, 0, 0
	if sh.keys[key] != e || e.resets != f.resets && !s.resetRace {
		// The key was reset or swept meanwhile: the units, maybe taken
		// before the reset, are forfeited.
		s.stats.forfeited.Add(g.Units)
		return nil
	}
	if g.Units == 0 {
		// Nothing fits, not even within the horizon: refused until the
		// same need fits, and no call can get it before it fits within
		// the horizon.
		d := max(g.TAT, g.Now) - g.Now
		retry := d + need*r.Interval - r.Tolerance
		e.refusedUntil, e.refusedQ, e.callAt = satAdd(now, retry), need, satAdd(now, retry-req.Horizon)
		if need > r.Limit {
			e.refusedUntil, e.callAt = int64(gcra.Never), int64(gcra.Never)
		}
		return nil
	}
	s.stats.leased.Add(g.Units)
	e.refusedUntil, e.callAt = 0, 0
	lk := e.lk
	if s.fullLifetime {
		lk = s.lifetime
	}
	// The grant's units live longer when the funnel was ahead of Redis's
	// time before it (see extension).
	e.lead0, e.lead = e.lead, max(g.TAT-g.Units*r.Interval-g.Now, 0)
	e.leads = min(e.leads+1, 2)
	ext, most := s.extension(e, r, e.lead)
	// Unit j's slot is max(0, off+j·T) after g.Now (gcra.LeaseSlot).
	off := g.TAT - (g.Units-1)*r.Interval - r.Tolerance - g.Now
	l := slots{n: g.Units, at: now, exp: sent + lk - e.skew, off: off, step: r.Interval, end: g.TAT, early: s.earlyUnits}
	l.extend(ext, most)
	s.stats.forfeited.Add(e.leases.add(l))
	return nil
}

// failed counts and logs (at most once a second) a lease call that failed
// with err, and returns what the decision answers: the caller's own
// context's error, an error that is an answer (funnelErr), or errFailed
// for the fallback.
func (s *Store) failed(ctx context.Context, key string, err error) error {
	s.stats.failed.Add(1)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.failLog.Do(func(held int64) {
		s.log.Warn("leasestore: a lease call failed; keys without units answer the fallback",
			"key", key, "err", err, "failures_held", held)
	})
	if funnelErr(err) {
		return err
	}
	return errFailed
}

// funnelErr reports whether err is an answer rather than an outage: a key
// of another type, or a bad limit.
func funnelErr(err error) bool {
	switch funnel.ClassOf(err) {
	case funnel.ClassWrongType, funnel.ClassInvalid:
		return true
	}
	return false
}

// refusal is the result of a refusal with retry after now.
func (s *Store) refusal(e *entry, r gcra.Params, now int64, retry time.Duration) funnel.Result {
	res := s.estimate(e, r, now)
	res.Allowed, res.RetryAfter, res.Remaining = false, retry, 0
	return res
}

// estimate is the result of a decision from memory: the key's TAT at the
// last call, as of now, and the units this store holds (see the package
// doc).
func (s *Store) estimate(e *entry, r gcra.Params, now int64) funnel.Result {
	res := funnel.Result{Allowed: true, Limit: r.Limit}
	d := int64(0)
	if e.at != 0 {
		d = max(e.ahead-(now-e.at), 0)
	}
	res.ResetAfter = time.Duration(d)
	free := int64(0)
	if r.Tolerance > d {
		free = (r.Tolerance - d) / r.Interval
	}
	res.Remaining = min(free+e.leases.avail(now), r.Limit)
	return res
}

// satAdd is a+b, saturated at the int64 bounds.
func satAdd(a, b int64) int64 {
	if b > 0 && a > 1<<63-1-b {
		return 1<<63 - 1
	}
	return a + b
}

// sweep drops the state of keys idle for ten lifetimes, every lifetime.
func (s *Store) sweep() {
	defer close(s.done)
	t := time.NewTicker(time.Duration(max(s.lifetime, int64(10*time.Millisecond))))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.sweepOnce(s.now())
		}
	}
}

func (s *Store) sweepOnce(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.keys {
			if e.flight == nil && now-e.used > 10*s.lifetime && e.refusedUntil <= now {
				s.forfeit(e)
				delete(sh.keys, k)
			}
		}
		for k, e := range sh.wkeys {
			if e.flight == nil && now-e.used > 10*s.lifetime && e.refusedUntil <= now {
				s.wforfeit(e)
				delete(sh.wkeys, k)
			}
		}
		for k, e := range sh.skeys {
			// A bucket that still drains keeps its level: its grants
			// are reserved until then.
			if e.flight == nil && now-e.used > 10*s.lifetime && !e.drains(now) {
				delete(sh.skeys, k)
			}
		}
		sh.mu.Unlock()
	}
}
