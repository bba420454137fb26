package leasestore

import (
	"context"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
)

// wentry is a window key's leases and what the store knows of its shared
// count. Its fields are guarded by its shard's lock.
type wentry struct {
	key string       // a copy: the caller's may alias a buffer it reuses
	lim funnel.Limit // the limit the state is for
	// leases holds the key's takes (each ends with its lifetime or its
	// window, whichever is sooner).
	leases blocks
	// back is the unspent units of ended leases of one window, and that
	// window's end, for the next call to refund.
	back block
	// refusedUntil is the local time before which no request of refusedQ
	// units (of at least refusedQ for a fixed window) can be admitted.
	refusedUntil, refusedQ int64
	// remaining is the window's units that the store had left at the last
	// call, valid before end (the local time its window had certainly
	// ended by; 0 before the first call).
	remaining, end int64
	size           int64
	spentOut       bool
	flight         *flight
	used           int64
	window, count  int64
	resets         int64 // Resets through this store (see entry.resets)
}

// windowed reports whether op is a take that takeWindow decides: one take
// of a fixed or sliding window, without a ban, of 1 to Count units.
func windowed(op *funnel.Op) bool {
	a := op.Limit.Algorithm
	return op.Kind == funnel.OpTake && (a == funnel.FixedWindow || a == funnel.SlidingWindow) &&
		op.Limit.Ban == 0 && op.N > 0 && op.N <= op.Limit.Window.Count
}

// takeWindow decides q units of key under the window limit c.
func (s *Store) takeWindow(ctx context.Context, key string, c *funnel.Checked, q int64, res *funnel.Result) error {
	sh := s.shard(key)
	return decide(s, ctx, sh, q, res, func(now int64) windowLane {
		e := sh.wkeys[key]
		if e == nil || e.lim != c.Limit {
			if e != nil {
				s.wforfeit(e) // the limit changed: start afresh
			}
			e = &wentry{key: strings.Clone(key), lim: c.Limit, size: 1}
			sh.wkeys[e.key] = e
		}
		e.used = now
		s.wexpire(e, now)
		return windowLane{s: s, e: e, key: key, c: c}
	})
}

// coldAt reports whether a key is cold here (see cold), for a key whose
// lease size, current lifetime-long window and count of decisions in it
// are size, window and count, and which holds units or has some to give
// back when holds. It warms the key when its count reaches warm, its first
// lease as large as that count (at most cap). The key's shard lock is held.
func coldAt(size, window, count *int64, holds bool, now, lifetime, cap, warm int64) bool {
	if *size > 1 || holds {
		return false
	}
	if now-*window >= lifetime {
		*window, *count = now, 0
	}
	*count++
	if *count >= warm {
		*size = min(*count, cap)
		return *size <= 1
	}
	return true
}

// wdirect decides q units of a cold window key in the store, as the plain
// decision it is: a take spent at once needs no lease.
func (s *Store) wdirect(ctx context.Context, key string, e *wentry, c *funnel.Checked, q int64, res *funnel.Result) error {
	if done, err := s.decideDirect(ctx, key, c, q, res); done {
		return err
	}
	if res.Allowed {
		s.stats.spent.Add(q)
	} else if res.RetryAfter > 0 {
		sh := s.shard(key)
		sh.mu.Lock()
		if sh.wkeys[key] == e {
			e.refusedUntil, e.refusedQ = satAdd(s.now(), int64(res.RetryAfter)), q
		}
		sh.mu.Unlock()
	}
	return nil
}

// refundable reports whether units of a window that has certainly ended
// by the local time end may still be refunded at now: only with
// Options.WindowRefunds, and the refund is sent at least one lifetime
// before then (see the package doc).
func (s *Store) refundable(end, now int64) bool {
	return s.refundLate || s.opts.WindowRefunds && now < end-s.lifetime
}

// wexpire drops the leases of e that have ended: their unspent units are
// kept in e.back for the next call to refund while that may still land in
// their window, and forfeited otherwise.
func (s *Store) wexpire(e *wentry, now int64) {
	if e.back.units > 0 && !s.refundable(e.back.end, now) {
		s.stats.forfeited.Add(e.back.units)
		e.back = block{}
	}
	for e.leases.n > 0 && e.leases.b[0].exp <= now {
		l := e.leases.b[0]
		if e.leases.n == 1 && 2*l.units > e.size {
			e.size = max(1, e.size/2) // most of it went unspent
		}
		switch {
		case l.units == 0:
		case !s.refundable(l.end, now):
			s.stats.forfeited.Add(l.units)
		case e.back.units > 0 && e.back.end != l.end:
			// Units of two windows: the later window's are kept.
			s.stats.forfeited.Add(e.back.units)
			e.back = block{units: l.units, end: l.end}
		default:
			e.back.units += l.units
			e.back.end = l.end
		}
		e.leases.drop()
	}
}

// wforfeit drops all of e's leases and its pending refund.
func (s *Store) wforfeit(e *wentry) {
	s.stats.forfeited.Add(e.leases.clear())
	s.stats.forfeited.Add(e.back.units)
	e.back = block{}
	e.size = 1
}

// wmaxLease is the most units one lease of c may ask for: a quarter of
// its count, and Options.MaxLease.
func (s *Store) wmaxLease(c *funnel.Checked) int64 {
	m := max(1, c.Window.Count/4)
	if s.opts.MaxLease > 0 {
		m = min(m, s.opts.MaxLease)
	}
	return m
}

// wstart begins a lease call on e for at least need units: it returns the
// call's flight, the units to refund first, and the units to take: the
// lease size, but no more than the window had left at the last call. e's
// shard lock is held.
func (s *Store) wstart(e *wentry, c *funnel.Checked, need, now int64) (*flight, block, int64) {
	if e.spentOut {
		e.size = min(2*e.size, s.wmaxLease(c))
		e.spentOut = false
	}
	k := max(e.size, need)
	if e.end > now {
		k = max(min(k, e.remaining+e.back.units), need)
	}
	back := e.back
	e.back = block{}
	f := &flight{done: make(chan struct{}), resets: e.resets}
	e.flight = f
	return f, back, k
}

// wprefetch starts a lease call in the background when a hot window key's
// units run low. e's shard lock is held.
func (s *Store) wprefetch(e *wentry, c *funnel.Checked, now int64) {
	if s.opts.NoPrefetch || e.flight != nil || e.size < 4 || e.leases.n > 1 || e.leases.held() > e.size/2 || e.spentOut {
		return
	}
	if e.end > now && e.remaining == 0 {
		return // the window was full at the last call
	}
	f, back, k := s.wstart(e, c, 1, now)
	s.stats.prefetches.Add(1)
	s.prefetchs.Add(1)
	go func() {
		defer s.prefetchs.Done()
		s.wcall(context.Background(), e.key, e, c, f, back, k, 1)
	}()
}

// wcall makes the lease call of flight f for e: it refunds back's units
// (alone in their Do call, as the Store contract asks), then takes k units
// of the window, all or nothing; a refused take of more than need units is
// asked again once for need (or the units the refusal says are left). It
// applies the answer: a new lease, or a refusal remembered until its
// RetryAfter, or errFailed.
func (s *Store) wcall(ctx context.Context, key string, e *wentry, c *funnel.Checked, f *flight, back block, k, need int64) error {
	s.stats.calls.Add(1)
	if back.units > 0 {
		if _, err := s.do1(ctx, funnel.OpRefund, key, c, back.units); err != nil {
			s.stats.forfeited.Add(back.units) // they stay charged
		} else {
			s.stats.givenBack.Add(back.units)
		}
	}
	sent := s.now()
	r, err := s.do1(ctx, funnel.OpTake, key, c, k)
	if err == nil && !r.Allowed && !r.Fallback && !r.Banned && k > need {
		if r.Remaining >= need {
			k = min(r.Remaining, k-1)
		} else {
			k = need
		}
		sent = s.now()
		r, err = s.do1(ctx, funnel.OpTake, key, c, k)
	}
	sh := s.shard(key)
	sh.mu.Lock()
	defer func() {
		e.flight = nil
		close(f.done)
		sh.mu.Unlock()
	}()
	if err == nil && r.Fallback {
		err = errFailed
	}
	if err != nil {
		return s.failed(ctx, key, err)
	}
	now := s.now()
	if sh.wkeys[key] != e || e.resets != f.resets && !s.resetRace {
		// The key was reset or swept meanwhile: the units, maybe taken
		// before the reset, are forfeited.
		if r.Allowed {
			s.stats.forfeited.Add(k)
		}
		return nil
	}
	if !r.Allowed {
		if k == need {
			e.refusedUntil, e.refusedQ = satAdd(now, int64(r.RetryAfter)), need
		}
		return nil
	}
	left := windowLeft(c, r.ResetAfter)
	exp := sent + min(s.lifetime, left)
	if s.ignoreWindowEnd {
		exp = sent + s.lifetime
	}
	e.remaining, e.end = r.Remaining, sent+left
	s.stats.leased.Add(k)
	e.refusedUntil = 0
	s.stats.forfeited.Add(e.leases.add(block{units: k, exp: exp, end: sent + left}))
	return nil
}

// windowLeft is the time from the store's now to the end of the window
// that an admitted take of c debited, from the take's ResetAfter: a fixed
// window's end, or a sliding window's current window's end, one period
// before its ResetAfter.
func windowLeft(c *funnel.Checked, reset time.Duration) int64 {
	if c.Algorithm == funnel.SlidingWindow {
		return max(int64(reset)-int64(c.Period), 0)
	}
	return int64(reset)
}

// estimate is the result of a decision from memory: the units the window
// had left at the last call, plus those held here (see the package doc).
func (e *wentry) estimate(c *funnel.Checked, now int64) funnel.Result {
	res := funnel.Result{Allowed: true, Limit: c.Window.Count}
	if e.end > now {
		res.Remaining = min(e.remaining+e.leases.held(), c.Window.Count)
		res.ResetAfter = time.Duration(e.end - now)
		if c.Algorithm == funnel.SlidingWindow {
			res.ResetAfter += c.Period
		}
	}
	return res
}
