package leasestore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/redisstore"
)

// ShareBackend is a Backend that also allocates rate shares
// (gcra.Share at its own time, atomically): a *redisstore.Store.
type ShareBackend interface {
	// Share serves one node's call for a share of key's funnel p.
	Share(ctx context.Context, key string, p gcra.Params, req gcra.ShareRequest) (gcra.ShareGrant, error)
}

// ErrShareMixed is what a ShareBackend answers (wrapped or as it is) when
// key is also decided plainly: its funnel's own state holds a TAT after
// the allocator's time that is not the shares' fence
// (redisstore.ErrShareMixed). A Store then decides
// the key in the Backend, plainly, for a lifetime, and asks again. A key
// that cannot have shares (redisstore.ErrNoShareKey: a '}' without a hash
// tag, in a Redis Cluster's terms) is decided plainly for good.
var ErrShareMixed = redisstore.ErrShareMixed

// ErrShares is the error of an operation that a key leased in rate shares
// does not support: a charge, a reservation, or a call of several
// operations that includes it beside anything but takes of other keys
// leased in shares. Its state is the shares the nodes hold, not a TAT that
// such an operation could move, nor one that a plain decision in Redis
// could take all-or-nothing with it.
var ErrShares = errors.New("leasestore: not supported on a key leased in rate shares")

// The share mode's constants.
const (
	// shareGrace is the least time after a call's send during which the
	// node may still admit under its older grants (gcra.ShareRequest's
	// Grace); it is four average round trips when they are longer.
	shareGrace = 5 * time.Millisecond
	// shareShift: a node renews early, at least L/8 after its last call,
	// when its requests since are off the demand it reported by more than
	// 30% and four standard deviations of a Poisson count.
	shareShift = 0.3
	// maxShareTolerance bounds the tolerance of a funnel leased in shares,
	// so that a node's level in parts of a unit, up to the limit times
	// ShareParts·Interval, fits an int64.
	maxShareTolerance = 1 << 42
	// shareCalls is the share of a node's decisions that its calls aim
	// at: a slow key's grants last longer, up to shareLongest lifetimes,
	// so that a node makes one call per 1/shareCalls of its decisions.
	shareCalls   = 0.004
	shareLongest = 10
	// minShareUnits is the least number of units a funnel's rate brings in
	// one lifetime for it to be leased in shares: a node's first grant
	// holds a sixteenth of them.
	minShareUnits = 16
	// minShareLimit is the least limit (burst+1) of a funnel leased in
	// shares: a fleet of 16 splits 64 units into buckets of about 4, which
	// refuse about one request in 8 of a node whose demand matches its
	// share, but under overload lose under 1% (in the model, 1.6% below
	// the limit). Smaller limits lose more than any memory-speed scheme
	// can save (TestSharesSmallLimits): at most B+1 nodes can hold a unit
	// at one instant (a burst of 10 on 16 nodes: 32–64% of the limit lost
	// in the model), and buckets of a few units lose one funnel's pooling
	// of random arrivals near the limit (on 3 nodes: 13% at 1.05×).
	minShareLimit = 64
)

// Shared reports whether a funnel p is leased in rate shares by a store
// whose lifetime is lifetime when its Options.Shares is set: its
// tolerance is at most about 73 minutes (2^42 ns), its rate brings at
// least 16 units per lifetime, and its limit is 64 units (a burst of 63)
// to gcra.MaxShareLimit: a smaller burst split among a fleet leaves its
// nodes buckets of a unit or none.
// Other funnels are leased in units, as without Options.Shares (see the
// package doc).
func Shared(p gcra.Params, lifetime time.Duration) bool {
	return shared(p, lifetime, minShareLimit)
}

// shared is Shared with minLimit for the least limit.
func shared(p gcra.Params, lifetime time.Duration, minLimit int64) bool {
	l := int64(lifetime)
	if p.Interval <= 0 || p.Tolerance < p.Interval || p.Tolerance > maxShareTolerance ||
		p.Limit < minLimit || p.Limit > gcra.MaxShareLimit || l > gcra.MaxShareLifetime*1000 {
		return false
	}
	units := l / p.Interval // the units a lifetime brings
	return units >= minShareUnits && units < 1<<32
}

// sgrant is a grant as the node reads it on its own clock: it admits in
// [admitFrom, admitTo) and drains at k until drainTo, whatever the
// offset of its clock from the allocator's within the call's bounds; c is
// its capacity in level units.
type sgrant struct {
	admitFrom, admitTo, drainTo int64
	k, c                        int64
}

// sentry is a key leased in shares: its grants, its one level, and its
// demand. Its fields are guarded by its shard's lock.
type sentry struct {
	key string
	p   gcra.Params
	// additive, set from the store's shareAdditive (tests only), adds
	// the grants' capacities and rates rather than taking the largest: a
	// mutation.
	additive bool
	// unit is one unit in level units (ShareParts·Interval): the level
	// falls by k per ns under a grant of k parts.
	unit   int64
	grants []sgrant
	// level is the key's level here, at local time levelAt.
	level, levelAt int64
	flight         *flight
	// sentAt is the local time the last call was sent, renewAt when the
	// next one is due (0: none yet), and noneUntil the local time before
	// which a call that granted nothing is not made again.
	sentAt, renewAt, noneUntil int64
	// mixedUntil is the local time until which the key is decided in the
	// Backend, plainly, after the allocator answered ErrShareMixed.
	mixedUntil int64
	// The demand: units asked for here since the last call (admitted or
	// not), the local time of that call, the smoothed demand in units per
	// ns, whether it is measured, and the demand the last call reported.
	count, reportAt    int64
	demand, reported   float64
	measured, everSent bool
	used               int64
	resets             int64
}

// sharesOn reports whether op is decided in rate shares by s.
func (s *Store) sharesOn(op *funnel.Op) bool {
	if s.shares == nil || op.Limit.Algorithm != funnel.GCRA || op.Limit.Ban != 0 {
		return false
	}
	if s.shareMinLimit > 0 {
		return shared(op.Limit.GCRA, s.opts.Lifetime, s.shareMinLimit)
	}
	return Shared(op.Limit.GCRA, s.opts.Lifetime)
}

// sharesDo decides ops when one of them is leased in shares, and reports
// whether it did.
func (s *Store) sharesDo(ctx context.Context, ops []funnel.Op, res []funnel.Result) (bool, error) {
	if s.shares == nil {
		return false, nil
	}
	for i := range ops {
		if !s.sharesOn(&ops[i]) {
			continue
		}
		op := &ops[i]
		switch {
		case len(res) < len(ops):
			return true, fmt.Errorf("%w: %d results for %d operations", ErrShares, len(res), len(ops))
		case len(ops) > 1:
			return true, s.shareTakeAll(ctx, ops, res)
		case op.Kind == funnel.OpTake && op.N > 0:
			return true, s.shareTake(ctx, op.Key, op.Limit.GCRA, op.N, &res[0])
		case op.Kind == funnel.OpTake && op.N < 0:
			// A take of a negative quantity gives units back, as
			// redis-cell's CL.THROTTLE does.
			s.shareRefund(op.Key, op.Limit.GCRA, -op.N, &res[0])
			return true, nil
		case op.Kind == funnel.OpTake || op.Kind == funnel.OpPeek:
			s.sharePeek(op.Key, op.Limit.GCRA, op.N, &res[0])
			return true, nil
		case op.Kind == funnel.OpRefund && op.N > 0:
			s.shareRefund(op.Key, op.Limit.GCRA, op.N, &res[0])
			return true, nil
		default:
			return true, fmt.Errorf("%w: operation %d", ErrShares, op.Kind)
		}
	}
	return false, nil
}

// shareRefund gives n units of key back to its bucket here (never below
// empty), and answers the state it leaves. The fleet stays within one
// exact funnel fed the same refunds: that funnel's level falls by n, and
// the sum of the nodes' levels by n or to 0.
func (s *Store) shareRefund(key string, p gcra.Params, n int64, res *funnel.Result) {
	e, now, unlock := s.lockedSentry(key, p)
	defer unlock()
	if n > e.level/e.unit {
		e.level = 0
	} else {
		e.level -= n * e.unit
	}
	*res = shareLane{s: s, e: e, key: key, now: now}.result(now)
}

// shareTakeAll decides several takes at once, all-or-nothing, when every
// one is of a key leased in shares (funnel.Store's contract: all charged
// if every one is admitted, else none, each result saying whether its op
// alone would be). The keys' buckets here decide it, under their shards'
// locks taken in order; a key without a grant that admits makes its call
// (or waits for the one in flight) first, with no lock held, and the
// decision starts again. Anything else with a key leased in shares in one
// call is ErrShares: a plain decision in Redis cannot be all-or-nothing
// with buckets in memory.
func (s *Store) shareTakeAll(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	for i := range ops {
		if op := &ops[i]; !s.sharesOn(op) || op.Kind != funnel.OpTake || op.N <= 0 {
			return fmt.Errorf("%w: %d operations at once, not all takes of keys leased in shares", ErrShares, len(ops))
		}
	}
	s.stats.decisions.Add(int64(len(ops)))
	idx := make([]int, 0, len(ops))
	for i := range ops {
		idx = append(idx, s.shardIndex(ops[i].Key))
	}
	locks := slices.Clone(idx)
	slices.Sort(locks)
	locks = slices.Compact(locks)
	lanes := make([]shareLane, len(ops))
	refused := make([]bool, len(ops))
	counted := false
	for {
		for _, i := range locks {
			s.shards[i].mu.Lock()
		}
		unlock := func() {
			for _, i := range locks {
				s.shards[i].mu.Unlock()
			}
		}
		now := s.now()
		var call *sentry
		var wait *flight
		refusedAny := false
		for i := range ops {
			op := &ops[i]
			l := s.shareLaneAt(&s.shards[idx[i]], op.Key, op.Limit.GCRA, op.N, !counted, now)
			e := l.e
			lanes[i], refused[i] = l, false
			if now < e.mixedUntil {
				unlock()
				return fmt.Errorf("%w: key %q is also decided plainly", ErrShares, op.Key)
			}
			held := l.held()
			if held >= op.N {
				continue
			}
			if l.refusedHere(op.N-held, now, &res[i]) {
				refused[i], refusedAny = true, true
				continue
			}
			if e.flight != nil {
				wait = e.flight
			} else if call == nil {
				call = e
			}
		}
		counted = true
		switch {
		case wait != nil:
			unlock()
			select {
			case <-wait.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		case call != nil:
			_, shifted := s.renewDue(call, now)
			f, req := s.shareStart(call, now, shifted)
			unlock()
			if err := s.shareCall(ctx, call, f, req); err != nil {
				if err != errFailed {
					return err
				}
				s.stats.fallbacks.Add(int64(len(ops)))
				for i := range ops {
					res[i] = funnel.Result{Fallback: true, Allowed: s.opts.FailOpen, Limit: ops[i].Limit.GCRA.Limit}
				}
				return nil
			}
			continue
		}
		for i := range ops {
			switch {
			case refusedAny && !refused[i]:
				res[i] = lanes[i].result(now) // would be admitted alone: nothing charged
			case !refusedAny:
				lanes[i].spend(ops[i].N, now, &res[i])
			}
		}
		if refusedAny {
			s.stats.localRefusals.Add(int64(len(ops)))
		} else {
			s.stats.local.Add(int64(len(ops)))
		}
		unlock()
		return nil
	}
}

// lockedSentry locks key's shard and returns its share entry for p,
// drained to now, and the function that unlocks the shard.
func (s *Store) lockedSentry(key string, p gcra.Params) (*sentry, int64, func()) {
	sh := s.shard(key)
	sh.mu.Lock()
	now := s.now()
	e := s.sentryOf(sh, key, p, now)
	e.drainTo(now)
	return e, now, sh.mu.Unlock
}

// sentryOf returns key's share entry on sh for the funnel p, made afresh
// when there is none or its limit changed. sh's lock is held.
func (s *Store) sentryOf(sh *shard, key string, p gcra.Params, now int64) *sentry {
	e := sh.skeys[key]
	if e == nil || e.p != p {
		if e != nil && e.drains(now) {
			// The limit changed while the old bucket still drains: keep
			// it (its grants are reserved) until it has.
			return e
		}
		e = &sentry{key: strings.Clone(key), p: p, unit: gcra.ShareParts * p.Interval, levelAt: now, reportAt: now, additive: s.shareAdditive}
		sh.skeys[e.key] = e
	}
	return e
}

// drains reports whether one of e's grants is still draining at now.
func (e *sentry) drains(now int64) bool {
	for _, g := range e.grants {
		if g.drainTo > now {
			return true
		}
	}
	return false
}

// drainTo brings e's level to local time x: it falls at the largest rate
// among the grants that surely hold at each instant, and the grants whose
// drain has ended are dropped.
func (e *sentry) drainTo(x int64) {
	u := e.levelAt
	if x <= u {
		return
	}
	e.levelAt = x
	if e.level > 0 {
		var pts [8]int64
		ps := append(pts[:0], u)
		for _, g := range e.grants {
			for _, p := range [2]int64{g.admitFrom, g.drainTo} {
				if p > u && p < x {
					ps = append(ps, p)
				}
			}
		}
		ps = append(ps, x)
		sortSmall(ps)
		for i := 0; i+1 < len(ps) && e.level > 0; i++ {
			a, b := ps[i], ps[i+1]
			var k int64
			for _, g := range e.grants {
				if g.admitFrom <= a && b <= g.drainTo {
					k = e.combine(k, g.k)
				}
			}
			if k > 0 && b-a >= e.level/k+1 {
				e.level = 0
			} else {
				e.level -= k * (b - a)
			}
			e.level = max(e.level, 0)
		}
	}
	live := e.grants[:0]
	for _, g := range e.grants {
		if g.drainTo > x {
			live = append(live, g)
		}
	}
	e.grants = live
}

// sortSmall sorts a few int64s in place.
func sortSmall(a []int64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// capAt returns the largest capacity among the grants that surely admit
// at local time x (0 when none does), and the largest rate among those
// that drain then.
func (e *sentry) capAt(x int64) (c, k int64) {
	for _, g := range e.grants {
		if g.admitFrom <= x && x < g.admitTo {
			c = e.combine(c, g.c)
		}
		if g.admitFrom <= x && x < g.drainTo {
			k = e.combine(k, g.k)
		}
	}
	return c, k
}

// combine is how overlapping grants add up: the largest of them (one
// bucket, reserved as the largest of the node's reservations).
func (e *sentry) combine(a, b int64) int64 {
	if e.additive {
		return a + b
	}
	return max(a, b)
}

// shareTake decides q units of key under p from the key's share.
func (s *Store) shareTake(ctx context.Context, key string, p gcra.Params, q int64, res *funnel.Result) error {
	sh := s.shard(key)
	asked := false
	return decide(s, ctx, sh, q, res, func(now int64) shareLane {
		l := s.shareLaneAt(sh, key, p, q, !asked, now)
		asked = true
		return l
	})
}

// shareLaneAt returns key's share entry on sh as a decision of q units
// sees it at now: drained to now, marked used, and with q counted in its
// demand when count is set (once per decision, however often it looks).
// sh's lock is held.
func (s *Store) shareLaneAt(sh *shard, key string, p gcra.Params, q int64, count bool, now int64) shareLane {
	e := s.sentryOf(sh, key, p, now)
	if count {
		e.count += q
	}
	e.used = now
	e.drainTo(now)
	return shareLane{s: s, e: e, key: key, now: now}
}

// sharePeek answers a peek of q units of key from the key's share here,
// charging nothing: whether this node would admit them now.
func (s *Store) sharePeek(key string, p gcra.Params, q int64, res *funnel.Result) {
	e, now, unlock := s.lockedSentry(key, p)
	defer unlock()
	l := shareLane{s: s, e: e, key: key, now: now}
	if held := l.held(); q <= held {
		*res = l.result(now)
		return
	}
	if !l.refusedHere(q-l.held(), now, res) {
		// No share here: as far as this node knows, the funnel is full.
		*res = funnel.Result{Allowed: true, Limit: p.Limit, Remaining: p.Limit}
		if q > p.Limit {
			res.Allowed, res.RetryAfter = false, gcra.Never
		}
	}
}

// shareLane is a share entry as decide sees it at now.
type shareLane struct {
	s   *Store
	e   *sentry
	key string
	now int64
}

// held is the units the key's bucket here admits now: none when its
// renewal is due and Options.NoPrefetch has the decision make it.
func (l shareLane) held() int64 {
	if l.syncRenewal() {
		return 0
	}
	c, _ := l.e.capAt(l.now)
	if c <= l.e.level {
		return 0
	}
	return (c - l.e.level) / l.e.unit
}

// result is the answer of a decision admitted at now.
// Its Remaining and ResetAfter are the node's bucket scaled to the whole
// limit, as if every node's bucket were as full as this one: Remaining is
// B·(c−ℓ)/c and ResetAfter τ·ℓ/c, so that a client that derives one from
// the other (redis-cell's reply does) reads the same state. Without a
// grant that admits now, the funnel is taken as full.
func (l shareLane) result(now int64) funnel.Result {
	e := l.e
	c, _ := e.capAt(now)
	r := funnel.Result{Allowed: true, Limit: e.p.Limit, ResetAfter: time.Duration(e.p.Tolerance)}
	switch {
	case c <= 0:
	case e.level <= 0:
		r.Remaining, r.ResetAfter = e.p.Limit, 0
	case e.level < c:
		f := float64(e.level) / float64(c)
		r.Remaining = int64(float64(e.p.Limit) * (1 - f))
		r.ResetAfter = time.Duration(math.Ceil(float64(e.p.Tolerance) * f))
	}
	return r
}

func (l shareLane) spend(q, now int64, res *funnel.Result) {
	l.e.level += q * l.e.unit
	l.s.stats.spent.Add(q)
	*res = l.result(now)
	l.s.maybeRenew(l.e, now)
}

// refusedHere refuses from memory while a grant admits here (the bucket
// is full: the share's rate refills it) or a call granted nothing lately.
func (l shareLane) refusedHere(need, now int64, res *funnel.Result) bool {
	e := l.e
	c, k := e.capAt(now)
	if c == 0 && now >= e.noneUntil || l.syncRenewal() {
		return false
	}
	q := need + l.held()
	// Remaining and ResetAfter as an admission reports them, the bucket
	// here scaled to the whole limit, Remaining below the q refused.
	*res = l.result(now)
	res.Allowed, res.Remaining = false, min(res.Remaining, q-1)
	switch {
	case q > e.p.Limit:
		res.RetryAfter = gcra.Never
	case c == 0:
		res.RetryAfter = time.Duration(e.noneUntil - now)
	case q*e.unit > c || k == 0:
		// Beyond this node's capacity: until its next call, which may
		// bring more.
		res.RetryAfter = time.Duration(max(e.renewAt-now, 1))
	default:
		res.RetryAfter = time.Duration(max((e.level+q*e.unit-c+k-1)/k, 1))
	}
	l.s.maybeRenew(e, now)
	return true
}

// syncRenewal reports whether the decision makes the key's renewal and
// waits for it: with Options.NoPrefetch, once it is due.
func (l shareLane) syncRenewal() bool {
	if !l.s.opts.NoPrefetch {
		return false
	}
	due, _ := l.s.renewDue(l.e, l.now)
	return due
}

func (l shareLane) inFlight() *flight { return l.e.flight }

func (l shareLane) cold(now int64) bool { return now < l.e.mixedUntil }

// direct decides a key that is also decided plainly (ErrShareMixed) in
// the Backend, under its full limit, as without leases.
func (l shareLane) direct(ctx context.Context, q int64, res *funnel.Result) error {
	if done, err := l.s.decideDirect(ctx, l.key, &funnel.Checked{GCRA: l.e.p}, q, res); done {
		return err
	}
	if res.Allowed {
		l.s.stats.spent.Add(q)
	}
	return nil
}

func (l shareLane) start(need, now int64) func(context.Context) error {
	_, shifted := l.s.renewDue(l.e, now)
	f, req := l.s.shareStart(l.e, now, shifted)
	return func(ctx context.Context) error { return l.s.shareCall(ctx, l.e, f, req) }
}

func (l shareLane) fallback() funnel.Result {
	return funnel.Result{Fallback: true, Allowed: l.s.opts.FailOpen, Limit: l.e.p.Limit}
}

// maybeRenew starts a call in the background when e's grant is due for
// renewal (a few round trips before it ends), or when its demand here has
// shifted from what it reported. e's shard lock is held.
func (s *Store) maybeRenew(e *sentry, now int64) {
	if s.opts.NoPrefetch {
		return
	}
	due, shifted := s.renewDue(e, now)
	if !due {
		return
	}
	f, req := s.shareStart(e, now, shifted)
	s.stats.prefetches.Add(1)
	s.prefetchs.Add(1)
	go func() {
		defer s.prefetchs.Done()
		s.shareCall(context.Background(), e, f, req)
	}()
}

// renewDue reports whether e's renewal is due at now: a few round trips
// before its grant ends, or sooner when its demand here has shifted from
// what it reported (by more than 30% and four standard deviations of a
// Poisson count, at least L/8 after the last call). e's shard lock is
// held.
func (s *Store) renewDue(e *sentry, now int64) (due, shifted bool) {
	if e.flight != nil || e.renewAt == 0 || now < e.mixedUntil {
		return false, false
	}
	if now >= e.renewAt {
		return true, false
	}
	if !e.measured || now-e.sentAt < s.lifetime/8 || e.count < 8 {
		return false, false
	}
	want := e.reported * float64(now-e.reportAt)
	dev := math.Abs(float64(e.count) - want)
	if dev <= shareShift*want || dev <= 4*math.Sqrt(want) {
		return false, false
	}
	return true, true
}

// shareStart begins a call for e at local time now: it measures the
// demand to report, and ends e's older grants a grace after now (the
// allocator ends their reservations as much after it serves the call).
// e's shard lock is held.
func (s *Store) shareStart(e *sentry, now int64, shifted bool) (*flight, gcra.ShareRequest) {
	f := &flight{done: make(chan struct{}), resets: e.resets}
	e.flight = f
	grace := min(max(int64(shareGrace), 4*s.rtt.Load()), s.lifetime/4)
	req := gcra.ShareRequest{Node: s.node, Demand: -1, Lifetime: s.lifetime / 1000, Grace: grace / 1000}
	e.drainTo(now)
	// The level under the older grants stays within Level from now on:
	// the level now, rounded up, and the units the demand asks for
	// within the grace (and one), at most their capacity.
	var most int64
	for _, g := range e.grants {
		most = max(most, g.c/e.unit)
	}
	req.Level = min((e.level+e.unit-1)/e.unit+int64(e.demand*float64(grace))+1, most)
	cut := req.Level
	if s.shareLowLevel {
		req.Level = max(req.Level-2, 0)
	}
	for i, g := range e.grants {
		if s.shareNoTruncate {
			break
		}
		// The allocator cuts them at its time of the call plus the grace
		// (and the level's drain), in whole µs: at least now less a µs.
		c := min(g.c/e.unit, cut) // a grant's capacity is whole units
		e.grants[i].c = c * e.unit
		e.grants[i].admitTo = min(g.admitTo, now+req.Grace*1000-1000)
		e.grants[i].drainTo = min(g.drainTo, now+req.Grace*1000+gcra.ShareDrain(c, g.k, e.p)-1000)
	}
	if e.everSent {
		if span := now - e.reportAt; span > 0 {
			inst := float64(e.count) / float64(span)
			if !e.measured || shifted {
				e.demand, e.measured = inst, true
			} else {
				w := 1 - math.Exp(-float64(span)/float64(2*s.lifetime))
				e.demand += w * (inst - e.demand)
			}
		}
		if e.measured {
			req.Demand = demandParts(e.demand, e.p.Interval, 2*s.lifetime)
			if e.demand > 0 && !s.shareFixedLife {
				// Long enough for a call per shareCalls of the decisions
				// here, within shareLongest lifetimes.
				life := min(max(s.lifetime, int64(1/(shareCalls*e.demand))), shareLongest*s.lifetime)
				req.Lifetime = min(life, gcra.MaxShareLifetime*1000, e.p.Interval*(1<<32-1)) / 1000
			}
		}
	}
	e.reported = e.demand
	if req.Demand < 0 {
		e.reported = 0
	}
	e.everSent = true
	e.count, e.reportAt, e.sentAt = 0, now, now
	return f, req
}

// demandParts converts a demand of d units per ns, averaged over
// smoothing ns, to the parts of the rate 1/interval that the node asks
// for: shaded down by one standard deviation of a Poisson rate's
// estimate, since a share a node does not use is lost to the fleet in
// overload while a share below its demand only lends rate to a node that
// uses it.
func demandParts(d float64, interval, smoothing int64) int64 {
	sd := math.Sqrt(d / float64(2*smoothing))
	x := max(d-sd, 0) * float64(interval) * gcra.ShareParts
	return int64(min(x, gcra.MaxShareDemand))
}

// shareCall makes the share call of flight f for e and applies its
// answer: a grant, nothing (until the grant's end), ErrShareMixed (plain
// decisions for a lifetime), or errFailed.
func (s *Store) shareCall(ctx context.Context, e *sentry, f *flight, req gcra.ShareRequest) error {
	s.stats.calls.Add(1)
	g, err := s.shares.Share(ctx, e.key, e.p, req)
	sh := s.shard(e.key)
	sh.mu.Lock()
	defer func() {
		e.flight = nil
		close(f.done)
		sh.mu.Unlock()
	}()
	now := s.now()
	sent := e.sentAt
	s.noteRTT(now - sent)
	if err != nil {
		if errors.Is(err, ErrShareMixed) {
			e.mixedUntil = now + s.lifetime
			return nil
		}
		if errors.Is(err, redisstore.ErrNoShareKey) {
			e.mixedUntil = math.MaxInt64
			return nil
		}
		return s.failed(ctx, e.key, err)
	}
	if sh.skeys[e.key] != e || e.resets != f.resets {
		return nil // reset or swept meanwhile: its level here is gone
	}
	e.drainTo(now)
	from := sent
	if s.shareNoMargin {
		from = now
	}
	end := from + (g.End-g.Now)*1000
	// The allocator's time u reads, on this clock, somewhere in
	// [u+sent−g.Now, u+now−g.Now], less one µs: its time is whole µs.
	if g.K > 0 {
		e.grants = append(e.grants, sgrant{
			admitFrom: now + (g.Start-g.Now)*1000, admitTo: end - 1000, drainTo: from + (g.Hold-g.Now)*1000 - 1000,
			k: g.K, c: g.C * e.unit,
		})
		e.noneUntil = 0
	} else {
		e.noneUntil = end
	}
	margin := 2*s.rtt.Load() + int64(200*time.Microsecond)
	e.renewAt = max(end-margin, now+1)
	return nil
}

// shareReset forgets key's level here, as a Reset of it does (the other
// nodes' levels are theirs; see the package doc). sh's lock is held.
func (s *Store) shareReset(sh *shard, key string) {
	if e := sh.skeys[key]; e != nil {
		e.level = 0
		e.resets++
	}
}
