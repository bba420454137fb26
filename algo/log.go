package algo

// LogDecide applies a request for q units at now to a sliding-log key whose
// admitted units happened at times (ms, ascending; one entry per unit). It
// returns the key's new log and the result.
//
// Units older than the period (at or before now−period, in ms) are dropped
// first; the request is admitted when the units left plus q are at most
// Count, and is then logged as q entries at now. This is exact: no interval
// of one period ever holds more than Count admitted units.
//
// The returned slice may share times's backing array; when the request is
// refused or is a peek, only the trimming differs from times.
func LogDecide(now int64, times []int64, p WindowParams, q int64) ([]int64, Result, error) {
	if err := checkQuantity(q); err != nil {
		return times, Result{}, err
	}
	ms := Millis(now)
	times = trimLog(times, ms-p.Period)
	n := int64(len(times))
	var r Result
	switch {
	case q > p.Count:
		r.RetryAfter = Never
	case n > p.Count-q:
		// Admitted once the oldest n+q−Count units have left the period.
		r.RetryAfter = until(now, times[n+q-p.Count-1]+p.Period)
	default:
		r.Allowed = true
		for i := int64(0); i < q; i++ {
			times = append(times, ms)
		}
		n += q
	}
	if n < p.Count {
		r.Remaining = p.Count - n
	}
	if n > 0 {
		r.ResetAfter = until(now, times[n-1]+p.Period)
	}
	return times, r, nil
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
// newest entries (never below an empty log) after trimming the old ones. q
// must not be negative.
func LogRefund(now int64, times []int64, p WindowParams, q int64) []int64 {
	times = trimLog(times, Millis(now)-p.Period)
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
