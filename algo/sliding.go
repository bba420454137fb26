package algo

// Sliding is the state of a sliding-window-counter key: Cur units admitted in
// the window (of the limit's period, aligned to the Unix epoch) that starts
// at Start (ms), and Prev units admitted in the window before it. The zero
// Sliding is an empty key.
type Sliding struct {
	Start, Prev, Cur int64
}

// roll returns st seen from the window that starts at start. A state of a
// later window (the clock was stepped back) counts as the current
// window's, so that a clock stepped back never grants a fresh window.
func (st Sliding) roll(start, period int64) Sliding {
	switch {
	case st.Start == start:
		return st
	case st.Start > start:
		return Sliding{Start: start, Prev: st.Prev, Cur: st.Cur}
	case st.Start == start-period:
		return Sliding{Start: start, Prev: st.Cur}
	}
	return Sliding{Start: start}
}

// weighted returns ceil(prev·(period−elapsed)/period): the previous
// window's units still counted elapsed ms into the current window, rounded
// up, so that comparing it in integers is the same as comparing the exact
// fraction. The numerator is at most count·period + period − 1, which the
// bound (count+1)·period ≤ MaxWeight keeps exact in a double (and in Redis's
// Lua).
func weighted(prev, period, elapsed int64) int64 {
	return (prev*(period-elapsed) + period - 1) / period
}

// SlidingDecide applies a request for q units at now to a sliding-window
// counter key in state st, under p. A refused request, or a peek, returns
// st itself: nothing is to be stored.
//
// The estimate of the units in the last period is the current window's units
// plus the previous window's weighted by the part of it still inside the
// sliding period: cur + prev·(period−elapsed)/period, elapsed in whole ms
// since the current window began. A request is admitted when the estimate
// plus q is at most Count, compared exactly (the weighted units are rounded
// up: cur + ceil(prev·(period−elapsed)/period) + q ≤ Count), as Cloudflare's
// sliding window counter compares it in real numbers.
//
// The estimate assumes the previous window's units were spread evenly over
// it. Every aligned window admits at most Count. Any interval of one period
// admits at most 2·Count − ⌈Count/Period⌉ (Period in ms), so at most
// 2·Count−1: while any of the previous window's units is inside the
// interval, the weight of the previous window is at least one. The worst
// case is Count units late in the last millisecond of one window, then
// Count − ⌈Count/Period⌉ early in the last millisecond of the next.
func SlidingDecide(now int64, st Sliding, p WindowParams, q int64) (Sliding, Result, error) {
	if err := checkQuantity(q); err != nil {
		return st, Result{}, err
	}
	ms := Millis(now)
	start := ms - mod(ms, p.Period)
	cur := st.roll(start, p.Period)
	elapsed := ms - start
	est := cur.Cur + weighted(cur.Prev, p.Period, elapsed)
	var r Result
	switch {
	case q > p.Count:
		r.RetryAfter = Never
	case est > p.Count-q:
		r.RetryAfter = Until(now, slidingRetry(cur, p, q))
	default:
		r.Allowed = true
		if q > 0 {
			cur.Cur += q
			est += q
			st = cur
		}
	}
	if est < p.Count {
		r.Remaining = p.Count - est
	}
	switch {
	case cur.Cur > 0:
		r.ResetAfter = Until(now, start+2*p.Period)
	case cur.Prev > 0:
		r.ResetAfter = Until(now, start+p.Period)
	}
	return st, r, nil
}

// slidingRetry returns the first millisecond at which a request for q units
// (q ≤ Count) would be admitted, if no other request comes first.
func slidingRetry(st Sliding, p WindowParams, q int64) int64 {
	start, prev, cur := st.Start, st.Prev, st.Cur
	if cur > p.Count-q {
		// Not in this window: in a later one, where this window's units are
		// the previous window's.
		start, prev, cur = start+p.Period, cur, 0
	}
	// The smallest elapsed e in [0, period] with weighted(prev, e) ≤ room:
	// prev·(period−e) ≤ room·period.
	room := p.Count - q - cur
	if prev == 0 {
		return start
	}
	e := p.Period - room*p.Period/prev
	if e < 0 {
		e = 0
	}
	return start + e
}

// SlidingRefund gives back q units to a sliding-window counter key at now,
// from the current window's units and never below zero; units of the
// previous window are not given back; a q ≤ 0 gives nothing back.
func SlidingRefund(now int64, st Sliding, p WindowParams, q int64) Sliding {
	ms := Millis(now)
	cur := st.roll(ms-mod(ms, p.Period), p.Period)
	cur.Cur -= max(q, 0)
	if cur.Cur < 0 {
		cur.Cur = 0
	}
	if cur.Cur == 0 && cur.Prev == 0 {
		return Sliding{}
	}
	return cur
}

// CheckSliding reports whether p can drive a sliding window counter:
// (count+1) × period (ms) must be at most MaxWeight, or ErrOverflow.
func (p WindowParams) CheckSliding() error {
	if p.Count >= MaxWeight/p.Period {
		return ErrOverflow
	}
	return nil
}
