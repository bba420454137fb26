package algo

// LogDecide applies a request for q units at now to a sliding-log key whose
// admitted units are recorded in times (ms, ascending; one entry per unit).
// It returns the key's new log and the result.
//
// A unit admitted at now is recorded as the millisecond at or after now,
// ⌈now⌉ (or the newest entry, if later: a clock that goes back keeps the log
// ascending), and counts until ⌈now⌉ + Period: the first millisecond boundary
// at or after now + Period. Entries at or before ⌊now⌋ − Period no longer count
// and are dropped first; the request is admitted when the entries left plus
// q are at most Count, and is then recorded as q entries. This is exact in
// nanoseconds: no interval of one period, [t, t+Period), ever holds more
// than Count admitted units. (Recording ⌊now⌋ instead would let a unit late
// in one millisecond and another early in the millisecond one period later
// through in less than a period.)
//
// The returned slice may share times's backing array, but the entries of
// times are never modified: when the request is refused or is a peek, the
// result is a suffix of times (the trimmed log) and storing it is optional.
func LogDecide(now int64, times []int64, p WindowParams, q int64) ([]int64, Result, error) {
	if err := checkQuantity(q); err != nil {
		return times, Result{}, err
	}
	times = trimLog(times, Millis(now)-p.Period)
	n := int64(len(times))
	var r Result
	switch {
	case q > p.Count:
		r.RetryAfter = Never
	case n > p.Count-q:
		// Admitted once the oldest n+q−Count units have left the period.
		r.RetryAfter = Until(now, times[n+q-p.Count-1]+p.Period)
	default:
		r.Allowed = true
		at := LogAt(now, times)
		for i := int64(0); i < q; i++ {
			times = append(times, at)
		}
		n += q
	}
	if n < p.Count {
		r.Remaining = p.Count - n
	}
	if n > 0 {
		r.ResetAfter = Until(now, times[n-1]+p.Period)
	}
	return times, r, nil
}

// LogProbe answers LogDecide's question for q units without recording
// them (a peek of q units): admitted or not, and when refused after how long
// (or Never). Remaining and ResetAfter are those of the log as it is. It
// appends nothing, so that a peek never grows the log's array.
func LogProbe(now int64, times []int64, p WindowParams, q int64) (Result, error) {
	if err := checkQuantity(q); err != nil {
		return Result{}, err
	}
	times = trimLog(times, Millis(now)-p.Period)
	_, r, _ := LogDecide(now, times, p, 0) // the log as it is
	n := int64(len(times))
	switch {
	case q > p.Count:
		r.Allowed, r.RetryAfter = false, Never
	case n > p.Count-q:
		r.Allowed, r.RetryAfter = false, Until(now, times[n+q-p.Count-1]+p.Period)
	}
	return r, nil
}

// LogAt is the millisecond at which units are recorded in the log times
// at now: now's, rounded up, or the newest entry's if later (the clock went
// back: the log stays ascending).
func LogAt(now int64, times []int64) int64 {
	at := CeilMillis(now)
	if n := len(times); n > 0 && times[n-1] > at {
		at = times[n-1]
	}
	return at
}

// trimLog drops the entries at or before cutoff.
func trimLog(times []int64, cutoff int64) []int64 {
	i := 0
	for i < len(times) && times[i] <= cutoff {
		i++
	}
	return times[i:]
}

// LogRefund gives back q units to a sliding-log key at now: it drops the q
// newest entries (never below an empty log) after trimming the old ones; a
// q ≤ 0 gives nothing back. Like LogDecide, it never modifies the entries
// of times.
func LogRefund(now int64, times []int64, p WindowParams, q int64) []int64 {
	times = trimLog(times, Millis(now)-p.Period)
	if q <= 0 {
		return times
	}
	if int64(len(times)) <= q {
		return times[:0]
	}
	return times[:int64(len(times))-q]
}

// CheckLog reports whether p can drive a sliding log: Count at most
// MaxLogCount, or ErrTooManyEvents.
func (p WindowParams) CheckLog() error {
	if p.Count > MaxLogCount {
		return ErrTooManyEvents
	}
	return nil
}
