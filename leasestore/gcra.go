package leasestore

import (
	"context"
	"math"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/redisstore"
)

var _ funnel.GCRAStore = (*Store)(nil)

// CommandLeaser is a Backend that leases the keys of Redis's GCRA command
// (a *redisstore.Store). A Backend that is not one has its GCRA calls
// forwarded as they are.
type CommandLeaser interface {
	funnel.GCRAStore
	// LeaseGCRA applies gcra.LeaseCommand to key at the store's time in
	// whole milliseconds, atomically.
	LeaseGCRA(ctx context.Context, key string, p gcra.CommandParams, call redisstore.LeaseCall) (redisstore.CommandGrant, error)
}

var _ CommandLeaser = (*redisstore.Store)(nil)

// commandSkew is the time a GCRA command key's lease is shortened by: the
// lease's Redis time is whole milliseconds, up to one before the call ran,
// so that its units are spent at most a lifetime after their slots.
const commandSkew = int64(time.Millisecond)

// ReducedCommand returns the parameters that the GCRA command's call p is
// leased under, and whether it is leased: p with its variance (the
// funnel's tolerance, in µs) shrunk by the key's lifetime
// L_k = min(lifetime, (variance−interval)/2), in whole µs, and Limit the
// whole intervals in that. As for a funnel (KeyLifetime), a call whose L_k
// would be under MinLifetime (plus the millisecond of the command's
// clock), whose variance with two lifetimes of future-dated units is above
// gcra.MaxLeaseTolerance µs, or whose parameters overflow, is not leased.
func ReducedCommand(p gcra.CommandParams, lifetime time.Duration) (gcra.CommandParams, bool) {
	l := int64(lifetime) / 1000
	if p.Overflow != nil || p.Interval < 1 || p.Variance < p.Interval || l <= 0 || p.Variance > gcra.MaxLeaseTolerance-2*l ||
		p.Increment > gcra.MaxLeaseTolerance {
		return gcra.CommandParams{}, false
	}
	lk := min(l, (p.Variance-p.Interval)/2)
	if lk*1000 < int64(MinLifetime)+commandSkew {
		return gcra.CommandParams{}, false
	}
	r := p
	r.Variance = p.Variance - lk
	r.Limit = r.Variance / r.Interval
	return r, true
}

// GCRA runs one call of Redis's GCRA command (funnel.GCRAStore) on key,
// leased as a funnel's decisions are (see the package doc): the call's
// tokens are spent from the key's leases in memory, which are leases of
// the command's own key (redisstore.Store.LeaseGCRA), under the command's
// funnel with its variance reduced (ReducedCommand), so that replayed
// through one exact command the fleet's admissions are all admitted.
//
// The reply is built from the configured parameters, as CL.THROTTLE's is
// from a leased decision: the configured limit, Remaining and ResetAfter
// from the time to the key's TAT as the command computes them, and
// RetryAfter the wait under the reduced variance (up to L_k longer than
// the command's; -1 for a call that the reduced funnel never fits). A cold
// key's call, one lease of exactly its tokens, knows the TAT exactly: its
// reply is the command's own when admitted. A call answered from memory
// estimates the TAT from the last lease call (other processes' spending
// since is not seen) and has the exact wait, rounded up to whole seconds.
// When Redis cannot be reached and the key holds no tokens, the reply is
// the fallback's (a fresh key's, limited unless FailOpen).
//
// Calls that are not leased (ReducedCommand, or a Backend that is not a
// CommandLeaser) go to the Backend as they are.
func (s *Store) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	cl, ok := s.b.(CommandLeaser)
	if !ok {
		return funnel.ForwardGCRA(ctx, s.b, key, p)
	}
	rc, ok := ReducedCommand(p, s.opts.Lifetime)
	if !ok {
		return cl.GCRA(ctx, key, p)
	}
	q := p.Increment / p.Interval
	// The funnel in ns, which the lanes run on: the key's own (its
	// entry's identity) and the reduced one.
	fp := gcra.Params{Interval: p.Interval * 1000, Tolerance: p.Variance * 1000, Limit: p.Limit, Burst: p.Limit - 1}
	r := gcra.Params{Interval: rc.Interval * 1000, Tolerance: rc.Variance * 1000, Limit: rc.Limit, Burst: rc.Limit - 1}
	var out commandOut
	var res funnel.Result
	sh := s.shard(key)
	asked := false
	err := decide(s, ctx, sh, q, &res, func(now int64) commandLane {
		e := s.entryOf(sh, key, fp, r, true, now)
		if !asked {
			e.askedSince += q
			asked = true
		}
		e.used = now
		s.expire(e, now)
		return commandLane{funnelLane: funnelLane{s: s, e: e, key: key, r: r, now: now}, cl: cl, p: p, rc: rc, out: &out}
	})
	switch {
	case err != nil:
		return funnel.GCRAResult{}, err
	case out.exact:
		return funnel.GCRAResult{Reply: out.rep}, nil
	case res.Fallback:
		_, rep, _, _ := gcra.DecideCommand(0, 0, false, p)
		rep.Limited = !s.opts.FailOpen
		return funnel.GCRAResult{Reply: rep, Fallback: true}, nil
	}
	wait := int64(-1)
	if !res.Allowed && res.RetryAfter != gcra.Never {
		wait = max(ceilDiv(int64(res.RetryAfter), 1000), 1)
	}
	return funnel.GCRAResult{Reply: commandReply(p, res.Allowed, ceilDiv(int64(res.ResetAfter), 1000), wait)}, nil
}

// commandOut is the exact reply of a cold key's call, which decide's
// funnel.Result cannot carry.
type commandOut struct {
	rep   gcra.CommandReply
	exact bool
}

// commandLane is a GCRA command key's entry as decide sees it: a funnel's
// lane whose cold calls are leases of exactly their tokens.
type commandLane struct {
	funnelLane
	cl    CommandLeaser
	p, rc gcra.CommandParams // the call's, and reduced
	out   *commandOut
}

// direct decides the q tokens of a cold key in Redis: a lease of exactly
// q tokens (none when they do not all fit), spent at once, whose grant
// gives the command's exact reply under the reduced parameters
// (gcra.DecideCommand on the TAT before it).
func (l commandLane) direct(ctx context.Context, q int64, res *funnel.Result) error {
	s, e, rc := l.s, l.e, l.rc
	s.stats.direct.Add(1)
	g, err := l.cl.LeaseGCRA(ctx, l.key, rc, redisstore.LeaseCall{LeaseRequest: gcra.LeaseRequest{Want: q, Min: q}})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if funnelErr(err) {
			return err
		}
		s.stats.fallbacks.Add(1)
		*res = l.fallback()
		return nil
	}
	// The reply: the TAT after the call when admitted, before it when
	// refused (an absent key's is now), and the wait under rc.
	d := min(max(g.TAT, g.Now)-g.Now, 1<<50) // µs ahead (bounded, see lease)
	wait := int64(-1)
	if g.Units == 0 && rc.Increment <= rc.Variance {
		wait = d + rc.Increment - rc.Variance
	}
	l.out.rep = commandReply(l.p, g.Units > 0, min(g.TAT-g.Now, 1<<50), wait)
	if g.TAT == 0 {
		l.out.rep = commandReply(l.p, false, 0, wait)
	}
	l.out.exact = true
	sh := s.shard(l.key)
	sh.mu.Lock()
	if sh.keys[l.key] == e {
		now := s.now()
		e.ahead, e.at = d*1000, now
		if g.Units == 0 {
			// Refused until the same tokens fit (counted from the
			// answer, as a lease call's refusal).
			retry := (d + q*rc.Interval - rc.Variance) * 1000
			if q > rc.Limit {
				e.refusedUntil = int64(gcra.Never)
			} else {
				e.refusedUntil = satAdd(now, max(retry, 0))
			}
			e.refusedQ, e.callAt = q, e.refusedUntil
		}
	}
	sh.mu.Unlock()
	if g.Units > 0 {
		s.stats.spent.Add(q)
	}
	*res = funnel.Result{Allowed: g.Units > 0}
	return nil
}

// commandReply is the GCRA command's reply under the configured p, as
// gcra.DecideCommand computes it, to a call admitted or not whose key's
// TAT is ttl µs after now (after the call when admitted, before it when
// not) and, when refused, that fits wait µs later (-1: never, which the
// reduced funnel may say of a call that p would admit some day). So a
// leased key's replies are the command's own but for the burst given up.
func commandReply(p gcra.CommandParams, admitted bool, ttl, wait int64) gcra.CommandReply {
	rep := gcra.CommandReply{Limited: !admitted, Limit: p.Limit, RetryAfter: -1}
	if next := p.Variance - ttl; next > -p.Interval {
		rep.Remaining = next / p.Interval
	}
	rep.ResetAfter = int64(math.Ceil(float64(ttl) / 1e6))
	if !admitted && wait >= 0 {
		rep.RetryAfter = int64(math.Ceil(float64(wait) / 1e6))
	}
	return rep
}

// ceilDiv is a/b rounded up, for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b > 0 {
		q++
	}
	return q
}

// lease makes e's lease call: a funnel's (Backend.Lease), or a GCRA
// command key's (CommandLeaser.LeaseGCRA, its µs converted to and from
// the ns of the lanes).
func (s *Store) lease(ctx context.Context, key string, e *entry, r gcra.Params, req gcra.LeaseRequest) (redisstore.Grant, error) {
	call := redisstore.LeaseCall{LeaseRequest: req, Node: s.node, Window: s.opts.Lifetime}
	if !e.cmd {
		return s.b.Lease(ctx, key, r, call)
	}
	cl := s.b.(CommandLeaser) // an entry is a command's only when it is
	call.Horizon /= 1000
	call.BackEnd /= 1000 // a lease's end, a whole µs
	p := gcra.CommandParams{Limit: r.Limit, Interval: r.Interval / 1000, Variance: r.Tolerance / 1000}
	g, err := cl.LeaseGCRA(ctx, key, p, call)
	if err != nil {
		return redisstore.Grant{}, err
	}
	// A TAT beyond what ns hold (a key set by hand) is as far as they go
	// past Redis's time: no lease reaches it.
	tat := g.TAT
	if tat > g.Now+1<<50 {
		tat = g.Now + 1<<50
	}
	return redisstore.Grant{Now: g.Now * 1000, Units: g.Units, TAT: tat * 1000, Nodes: g.Nodes}, nil
}
