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
func CalendarSpan(now int64, unit byte, loc *time.Location) Span {
	if loc == nil {
		loc = time.UTC
	}
	t := time.Unix(0, now).In(loc)
	y, m, d := t.Date()
	var start, end time.Time
	switch unit {
	case 'm':
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case 'w':
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	default:
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	}
	return Span{Start: start.UnixMilli(), End: end.UnixMilli()}
}

// Fixed is the state of a fixed-window key: N units admitted in the window
// that starts at Start (ms). The zero Fixed is an empty key.
type Fixed struct {
	Start, N int64
}

// FixedDecide applies a request for q units at now to a fixed-window key in
// state st, where span is the window that holds now and count the units it
// admits. A refused request, or a peek (q = 0), returns st itself: nothing is
// to be stored. A state of an earlier window reads as empty.
//
// It admits when the window's units plus q are at most count; otherwise
// RetryAfter is the time to the window's end, or Never when q > count.
func FixedDecide(now int64, st Fixed, count int64, span Span, q int64) (Fixed, Result, error) {
	if err := checkQuantity(q); err != nil {
		return st, Result{}, err
	}
	n := int64(0)
	if st.Start == span.Start {
		n = st.N
	}
	var r Result
	switch {
	case q > count:
		r.RetryAfter = Never
	case n > count-q:
		r.RetryAfter = until(now, span.End)
	default:
		r.Allowed = true
		if q > 0 {
			n += q
			st = Fixed{Start: span.Start, N: n}
		}
	}
	if n > 0 {
		r.ResetAfter = until(now, span.End)
	}
	if n < count {
		r.Remaining = count - n
	}
	return st, r, nil
}

// FixedRefund gives back q units to a fixed-window key in the window span,
// never below zero (the zero Fixed: no state). Units spent in an earlier
// window are not given back. q must not be negative.
func FixedRefund(st Fixed, span Span, q int64) Fixed {
	if st.Start != span.Start || st.N <= q {
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
