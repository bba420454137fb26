package algo

// Charges: units already spent, recorded whatever the key holds (a cost
// known only afterwards, such as the tokens of a response). A window's
// count goes past its limit; the key is then refused until the units that
// put it over no longer count. The result of each is that of a peek (q = 0)
// at the state the charge leaves: Allowed reports that the key is within its
// limit after the charge (a charge that the take would have admitted
// answers exactly what the take answers), and when it is not, Remaining is
// 0, RetryAfter is the time until the key is at its limit again (no longer
// over it), and ResetAfter, the time until the key holds no state, covers
// the whole debt. A negative q is ErrNegative, and a count that would leave
// the bounds that keep it exact (MaxCount; for the sliding window counter
// also MaxWeight, as CheckSliding) is ErrOverflow; either returns the state
// unchanged. A q of 0 charges nothing.

// FixedCharge charges q units to a fixed-window key in state st at now, in
// the window span under a limit of count units: the window's count may go
// past count, and the key is then refused until the window ends (the next
// window starts afresh, as a window's count does).
func FixedCharge(now int64, st Fixed, count int64, span Span, q int64) (Fixed, Result, error) {
	if err := checkQuantity(q); err != nil {
		return st, Result{}, err
	}
	n := int64(0)
	if st.Start >= span.Start {
		n = st.N
	}
	if q > MaxCount-n {
		return st, Result{}, ErrOverflow
	}
	if q > 0 {
		st = Fixed{Start: span.Start, N: n + q}
	}
	_, r, err := FixedDecide(now, st, count, span, 0)
	return st, r, err
}

// SlidingCharge charges q units to a sliding-window-counter key in state st
// at now, under p: the current window's count may go past p.Count, and the
// key is refused while the estimate (see SlidingDecide) is above it, which
// the debt keeps through the next window as it weighs less and less. The
// current window's count after the charge is bounded as p.Count is:
// (cur+1)·Period below MaxWeight, and cur at most MaxCount.
func SlidingCharge(now int64, st Sliding, p WindowParams, q int64) (Sliding, Result, error) {
	if err := checkQuantity(q); err != nil {
		return st, Result{}, err
	}
	ms := Millis(now)
	cur := st.roll(ms-mod(ms, p.Period), p.Period)
	if q > MaxCount-cur.Cur || cur.Cur+q >= MaxWeight/p.Period {
		return st, Result{}, ErrOverflow
	}
	if q > 0 {
		cur.Cur += q
		st = cur
	}
	_, r, err := SlidingDecide(now, st, p, 0)
	return st, r, err
}

// LogCharge charges q units to a sliding-log key whose units are recorded
// in times (see LogDecide): they are recorded at ⌈now⌉ (or the newest
// entry, if later) like admitted units, past p.Count if need be, and the key
// is refused until enough of them have left the period.
//
// A log over its count keeps only its newest Count+1 entries, so that a
// key's memory stays bounded by its count however large the charge: every
// later decision, peek and ResetAfter is the same as with the whole log (an
// older entry leaves the period no later than the newest Count+1, and only
// those decide when the key is back within its limit), but a later refund
// gives back from the entries kept, not from the debt that was dropped.
// The returned slice may share times's backing array; the entries of times
// are never modified.
func LogCharge(now int64, times []int64, p WindowParams, q int64) ([]int64, Result, error) {
	if err := checkQuantity(q); err != nil {
		return times, Result{}, err
	}
	times = trimLog(times, Millis(now)-p.Period)
	if q > 0 {
		at := LogAt(now, times)
		keep := p.Count + 1
		add := min(q, keep)
		if drop := int64(len(times)) + add - keep; drop > 0 {
			times = times[drop:]
		}
		for range add {
			times = append(times, at)
		}
	}
	_, r, err := LogDecide(now, times, p, 0)
	return times, r, err
}
