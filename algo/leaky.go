package algo

import (
	"time"

	"github.com/funnelrl/funnel/gcra"
)

// NoDelay is the delay of a delaying bucket that never delays (nginx's
// nodelay): every request within the burst passes at once.
const NoDelay = int64(1<<63 - 1)

// LeakyDecide applies a request for q units at now to a delaying leaky
// bucket (nginx's limit_req) whose state is the funnel's theoretical arrival
// time tat, under the funnel parameters p: a bucket that drains one unit
// every p.Interval and holds p.Burst units beyond the one being served.
//
// Admission is exactly gcra.Decide's, so the delaying bucket and the funnel
// share their state. An admitted request is not sent at once but told to
// wait: the queue ahead of it, max(now, tat)−now, less the first delay units
// that pass at once (nginx's delay=; NoDelay, or any delay ≥ burst, never
// waits). With delay 0, admitted requests proceed one p.Interval apart (a
// request for q units then takes q intervals). This is nginx's rule: its
// excess after a request is max(0, tat−now)/interval units, the request
// waits (excess − delay)/rate when the excess is above delay, and the first
// request on an idle key has excess 0, so it never waits. A negative delay
// or quantity is ErrNegative (give units back with Refund).
func LeakyDecide(now, tat int64, p gcra.Params, delay, q int64) (int64, Result, error) {
	if delay < 0 || q < 0 {
		return tat, Result{}, ErrNegative
	}
	newTAT, g, err := gcra.Decide(now, tat, p, q)
	if err != nil {
		return tat, Result{}, err
	}
	r := Result{Allowed: g.Allowed, Remaining: g.Remaining, RetryAfter: g.RetryAfter, ResetAfter: g.ResetAfter}
	if g.Allowed && q > 0 && tat > now && delay < p.Burst {
		// delay < burst, and burst·interval fits (it is below the tolerance).
		if wait := tat - now - delay*p.Interval; wait > 0 {
			r.Delay = time.Duration(wait)
		}
	}
	return newTAT, r, nil
}

// Refund gives back q units to a funnel (or delaying bucket) key at now:
// its TAT moves back by q intervals, never to before now. It returns the new
// TAT and false when the key is then empty (0 when the refund emptied it,
// and the state may be forgotten; a TAT empty at now already is returned
// as it is, as Redis leaves its key, so that after a clock stepped back it
// still limits). A q ≤ 0 gives nothing back.
func Refund(now, tat int64, p gcra.Params, q int64) (int64, bool) {
	if tat <= now {
		return tat, false
	}
	if q <= 0 {
		return tat, true
	}
	if (tat-now)/q < p.Interval {
		return 0, false // q intervals reach back past now (and q·interval may overflow)
	}
	tat -= q * p.Interval
	if tat <= now {
		return 0, false
	}
	return tat, true
}
