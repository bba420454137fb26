package algo

import "time"

// Span is one window, [Start, End) in milliseconds since the Unix epoch.
type Span struct {
	Start, End int64
}

// EpochSpan returns the window of period milliseconds that holds now, with
// windows aligned to the Unix epoch (so a 1-minute window starts on the
// minute, a 24-hour window at midnight UTC).
func EpochSpan(now, period int64) Span {
	ms := Millis(now)
	start := ms - mod(ms, period)
	return Span{Start: start, End: start + period}
}

// CalendarSpan returns the calendar day, ISO week (from Monday) or month
// that holds now in loc (UTC when nil), as a span of milliseconds. The span
// follows loc's daylight-saving rules, so a day may last 23 or 25 hours.
// unit is one of 'd', 'w' or 'm'.
//
// A day starts at the first instant whose date in loc is that day, which is
// not always midnight: where the clocks jump over midnight (America/Havana,
// America/Santiago, Atlantic/Azores in spring), the day starts at the jump.
// The spans tile the time line: each one ends where the next one starts.
func CalendarSpan(now int64, unit byte, loc *time.Location) Span {
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	switch unit {
	case 'm':
		d = 1
	case 'w':
		d -= (int(t.Weekday()) + 6) % 7 // back to Monday
	}
	// span returns the k-th span from the one that starts on y-m-d.
	span := func(k int) (int64, int64) {
		switch unit {
		case 'm':
			return dayStart(y, m+time.Month(k), 1, loc), dayStart(y, m+time.Month(k+1), 1, loc)
		case 'w':
			return dayStart(y, m, d+7*k, loc), dayStart(y, m, d+7*k+7, loc)
		}
		return dayStart(y, m, d+k, loc), dayStart(y, m, d+k+1, loc)
	}
	start, end := span(0)
	// Where the clocks went back across midnight (America/Goose_Bay until
	// 2010), a date recurs after the next one has begun: the instant belongs
	// to the span that holds it.
	for k := 0; k > -3 && k < 3; {
		switch {
		case now < start*int64(time.Second):
			k--
		case now >= end*int64(time.Second):
			k++
		default:
			return Span{Start: start * 1000, End: end * 1000}
		}
		start, end = span(k)
	}
	return Span{Start: start * 1000, End: end * 1000}
}

// dayStart returns the first second (since the Unix epoch) at which the date
// in loc is y-m-d (normalized as time.Date does) or later.
func dayStart(y int, m time.Month, d int, loc *time.Location) int64 {
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() // midnight on the wall clock
	u := time.Date(y, m, d, 0, 0, 0, 0, loc).Unix()
	if wallClock(u, loc) >= day && wallClock(u-1, loc) < day {
		return u
	}
	// Midnight falls in a gap or an overlap, and time.Date chose a side
	// (not always the first instant of the day). Offsets differ by less
	// than two days, so the day starts within two days of u.
	lo, hi := u-2*86400, u+2*86400
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if wallClock(mid, loc) >= day {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// wallClock returns the second u as loc's clock reads it, counted like a
// Unix time.
func wallClock(u int64, loc *time.Location) int64 {
	_, off := time.Unix(u, 0).In(loc).Zone()
	return u + int64(off)
}

// Fixed is the state of a fixed-window key: N units admitted in the window
// that starts at Start (ms). The zero Fixed is an empty key.
type Fixed struct {
	Start, N int64
}

// FixedDecide applies a request for q units at now to a fixed-window key in
// state st, where span is the window that holds now and count the units it
// admits. A refused request, or a peek (q = 0), returns st itself: nothing is
// to be stored. A state of an earlier window reads as empty; a state of a
// later window (the clock was stepped back) counts as the current
// window's, so that a clock stepped back never grants a fresh window.
//
// It admits when the window's units plus q are at most count; otherwise
// RetryAfter is the time to the window's end, or Never when q > count.
func FixedDecide(now int64, st Fixed, count int64, span Span, q int64) (Fixed, Result, error) {
	if err := checkQuantity(q); err != nil {
		return st, Result{}, err
	}
	n := int64(0)
	if st.Start >= span.Start {
		n = st.N
	}
	var r Result
	switch {
	case q > count:
		r.RetryAfter = Never
	case n > count-q:
		r.RetryAfter = Until(now, span.End)
	default:
		r.Allowed = true
		if q > 0 {
			n += q
			st = Fixed{Start: span.Start, N: n}
		}
	}
	if n > 0 {
		r.ResetAfter = Until(now, span.End)
	}
	if n < count {
		r.Remaining = count - n
	}
	return st, r, nil
}

// FixedRefund gives back q units to a fixed-window key in the window span,
// never below zero (the zero Fixed: no state). Units spent in an earlier
// window are not given back (those of a later one, after the clock was
// stepped back, are, as FixedDecide counts them); a q ≤ 0 gives nothing
// back.
func FixedRefund(st Fixed, span Span, q int64) Fixed {
	if q <= 0 && st.Start >= span.Start {
		return st
	}
	if st.Start < span.Start || st.N <= q {
		return Fixed{}
	}
	st.N -= q
	return st
}

// mod returns a mod m, in [0, m), for m > 0.
func mod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}
