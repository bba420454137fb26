package leasestore

import (
	"context"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// lane is what a leased decision does that depends on its limit's kind (a
// funnel's TAT, a window's count), on one key's entry: decide runs the
// same loop over both. Its methods are called with the key's shard lock
// held, but for direct and the function that start returns.
type lane interface {
	// held is the units the entry holds.
	held() int64
	// spend takes q units from memory, writes the decision's result, and
	// may start a background lease call.
	spend(q, now int64, res *funnel.Result)
	// refusedHere writes a refusal from memory and reports true when a
	// recent lease call found no room for need more units until later.
	refusedHere(need, now int64, res *funnel.Result) bool
	// inFlight is the entry's lease call in flight, or nil.
	inFlight() *flight
	// cold reports whether the decision goes to the store as a plain
	// decision (see coldAt).
	cold(now int64) bool
	// direct decides q units of a cold key in the store.
	direct(ctx context.Context, q int64, res *funnel.Result) error
	// start begins a lease call for at least need units and returns the
	// function that makes it.
	start(need, now int64) func(context.Context) error
	// fallback is the answer when a lease call failed.
	fallback() funnel.Result
}

// decide is the loop of every leased decision of q units on sh: spend
// from memory, refuse from memory, wait for the call in flight, go to the
// store for a cold key, or make a lease call and look again. lookup
// returns the key's lane at now (finding or making its entry).
func decide[L lane](s *Store, ctx context.Context, sh *shard, q int64, res *funnel.Result, lookup func(now int64) L) error {
	s.stats.decisions.Add(1)
	waited := false
	sh.mu.Lock()
	for {
		now := s.now()
		l := lookup(now)
		held := l.held()
		if held >= q {
			l.spend(q, now, res)
			if !waited {
				s.stats.local.Add(1)
			}
			sh.mu.Unlock()
			return nil
		}
		need := q - held
		if l.refusedHere(need, now, res) {
			s.stats.localRefusals.Add(1)
			sh.mu.Unlock()
			return nil
		}
		if f := l.inFlight(); f != nil {
			// A call is in flight: wait for it, then look again.
			sh.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				*res = funnel.Result{}
				return ctx.Err()
			}
			waited = true
			sh.mu.Lock()
			continue
		}
		if l.cold(now) {
			sh.mu.Unlock()
			return l.direct(ctx, q, res)
		}
		call := l.start(need, now)
		sh.mu.Unlock()
		err := call(ctx)
		waited = true
		if err != nil {
			if err == errFailed {
				s.stats.fallbacks.Add(1)
				*res = l.fallback()
				return nil
			}
			*res = funnel.Result{}
			return err
		}
		sh.mu.Lock()
	}
}

// funnelLane is a funnel's entry as decide sees it at now: p the limit, r
// the funnel it is leased under.
type funnelLane struct {
	s   *Store
	e   *entry
	key string
	r   gcra.Params
	now int64
}

// held is the units spendable now; future-dated units that have not
// matured are not.
func (l funnelLane) held() int64 { return l.e.leases.avail(l.now) }

func (l funnelLane) spend(q, now int64, res *funnel.Result) {
	l.s.spend(l.e, q, now)
	*res = l.s.estimate(l.e, l.r, now)
	l.s.maybePrefetch(l.e, l.r, now)
}

func (l funnelLane) refusedHere(need, now int64, res *funnel.Result) bool {
	e, r := l.e, l.r
	if q := need + e.leases.avail(now); e.leases.live(now) >= q {
		// Future-dated units held here cover the request: it waits for
		// the last of them to mature, and a lease call would only bring
		// units after them.
		*res = l.s.refusal(e, r, now, time.Duration(e.leases.wait(q, now)-now))
		l.s.maybePrefetch(e, r, now)
		return true
	}
	if e.callAt <= now || need < e.refusedQ {
		return false
	}
	// A call found no room for refusedQ more units before refusedUntil;
	// more units come one interval each later.
	retry := time.Duration(satAdd(e.refusedUntil-now, (need-e.refusedQ)*r.Interval))
	if need > r.Limit {
		retry = gcra.Never
	}
	*res = l.s.refusal(e, r, now, retry)
	return true
}

func (l funnelLane) inFlight() *flight { return l.e.flight }

func (l funnelLane) cold(now int64) bool { return l.s.cold(l.e, now) }

func (l funnelLane) direct(ctx context.Context, q int64, res *funnel.Result) error {
	return l.s.direct(ctx, l.key, l.e, l.r, q, res)
}

func (l funnelLane) start(need, now int64) func(context.Context) error {
	f, req := l.s.start(l.e, l.r, need, now)
	return func(ctx context.Context) error { return l.s.call(ctx, l.key, l.e, l.r, f, req, need, now) }
}

func (l funnelLane) fallback() funnel.Result {
	return funnel.Result{Fallback: true, Allowed: l.s.opts.FailOpen, Limit: l.r.Limit}
}

// windowLane is a window's entry as decide sees it.
type windowLane struct {
	s   *Store
	e   *wentry
	key string
	c   *funnel.Checked
}

func (l windowLane) held() int64 { return l.e.leases.held() }

func (l windowLane) spend(q, now int64, res *funnel.Result) {
	if l.e.leases.spend(q) {
		l.e.spentOut = true
	}
	l.s.stats.spent.Add(q)
	*res = l.e.estimate(l.c, now)
	l.s.wprefetch(l.e, l.c, now)
}

func (l windowLane) refusedHere(need, now int64, res *funnel.Result) bool {
	e := l.e
	if e.refusedUntil <= now || !(need == e.refusedQ || need > e.refusedQ && l.c.Algorithm == funnel.FixedWindow) {
		return false
	}
	// A take of refusedQ units was refused until refusedUntil; in a fixed
	// window no more units fit before then either.
	*res = e.estimate(l.c, now)
	res.Allowed, res.Remaining, res.RetryAfter = false, 0, time.Duration(e.refusedUntil-now)
	return true
}

func (l windowLane) inFlight() *flight { return l.e.flight }

func (l windowLane) cold(now int64) bool {
	e := l.e
	return coldAt(&e.size, &e.window, &e.count, e.leases.n > 0 || e.back.units > 0, now, l.s.lifetime, l.s.wmaxLease(l.c), l.s.warm)
}

func (l windowLane) direct(ctx context.Context, q int64, res *funnel.Result) error {
	return l.s.wdirect(ctx, l.key, l.e, l.c, q, res)
}

func (l windowLane) start(need, now int64) func(context.Context) error {
	f, back, k := l.s.wstart(l.e, l.c, need, now)
	return func(ctx context.Context) error { return l.s.wcall(ctx, l.key, l.e, l.c, f, back, k, need) }
}

func (l windowLane) fallback() funnel.Result {
	return funnel.Result{Fallback: true, Allowed: l.s.opts.FailOpen, Limit: l.c.Window.Count}
}
