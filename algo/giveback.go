package algo

import "github.com/funnelrl/funnel/gcra"

// Giving back part of a reservation (funnel.ReserveStore's settle rule):
// only what the key still counts of the units taken at the millisecond at,
// so that a settle never gives back units that the window no longer
// counts, nor units that other requests took.

// FunnelGiveBack gives back q units of a reservation to a funnel (or
// delaying bucket) key whose TAT is tat at now, where end was the key's
// TAT just after the reservation's take: the TAT moves back q intervals,
// but never by more than end − now, the part of the reservation's units
// that has not drained yet (units that drained are no longer counted, and
// the key may hold others' units in their place), and never to before
// now. It returns the new TAT and false when the key is then empty (0
// when the give-back emptied it; a TAT empty at now already is returned
// as it is, as Redis leaves it). A q ≤ 0, or an end at or before now,
// gives nothing back.
func FunnelGiveBack(now, tat int64, p gcra.Params, end, q int64) (int64, bool) {
	if tat <= now {
		return tat, false
	}
	if q <= 0 || end <= now {
		return tat, true
	}
	back := end - now
	if back/q >= p.Interval {
		back = q * p.Interval // at most end − now: it fits
	}
	if tat-now <= back {
		return 0, false
	}
	return tat - back, true
}

// FixedGiveBack gives back q units taken at the millisecond at to a
// fixed-window key in state st, where span is the window that holds now:
// only when at is in span and st is span's state (FixedRefund), else
// nothing, st unchanged. A state of a later window (the clock was stepped
// back), which FixedDecide counts as span's, holds none of the units taken
// at: nothing is given back from it.
func FixedGiveBack(st Fixed, span Span, at, q int64) Fixed {
	if at < span.Start || at >= span.End || st.Start != span.Start || q <= 0 {
		return st
	}
	return FixedRefund(st, span, q)
}

// SlidingGiveBack gives back q units taken at the millisecond at to a
// sliding-window counter key at now: from the current window's units when
// at is in the current window, from the previous window's when it is in
// the previous one (never below zero), and nothing when at is older. The
// state is then rolled to now's window; when nothing is given back, st is
// returned unchanged. A state of a later window (the clock was stepped
// back), which SlidingDecide counts as the current one's, holds none of
// the units taken at: nothing is given back from it.
func SlidingGiveBack(now int64, st Sliding, p WindowParams, at, q int64) Sliding {
	ms := Millis(now)
	start := ms - mod(ms, p.Period)
	if st.Start > start || q <= 0 {
		return st
	}
	cur := st.roll(start, p.Period)
	switch at - mod(at, p.Period) {
	case start:
		if cur.Cur == 0 {
			return st
		}
		cur.Cur = max(cur.Cur-q, 0)
	case start - p.Period:
		if cur.Prev == 0 {
			return st
		}
		cur.Prev = max(cur.Prev-q, 0)
	default:
		return st
	}
	if cur.Cur == 0 && cur.Prev == 0 {
		return Sliding{}
	}
	return cur
}

// LogGiveBack gives back q units recorded at the millisecond at to a
// sliding-log key at now: it drops up to q entries of at, and no other
// (the old ones stay, which a limit with a longer period may still count,
// and whose entries are trimmed by the next take). A log over its count
// gives nothing back: a charge may have dropped its oldest entries
// (LogCharge keeps the newest Count+1), which cannot be told from the
// reservation's, so that dropping entries of at could leave fewer than
// the units spent. Unlike LogDecide, it moves the newer entries down in
// times' array, which the caller gives up; when it drops nothing, it
// returns times itself.
func LogGiveBack(now int64, times []int64, p WindowParams, at, q int64) []int64 {
	if int64(len(trimLog(times, Millis(now)-p.Period))) > p.Count {
		return times
	}
	i := 0
	for i < len(times) && times[i] < at {
		i++
	}
	j := i
	for j < len(times) && times[j] == at && int64(j-i) < q {
		j++
	}
	if j == i {
		return times
	}
	return append(times[:i], times[j:]...)
}
