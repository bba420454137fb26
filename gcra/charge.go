package gcra

import "math"

// Charge records quantity units already spent by a key whose theoretical
// arrival time is tat, at time now: whatever the key holds, the TAT moves
// to max(now, tat) + quantity·Interval, past the tolerance if need be (a
// debt). It is the decision of a cost known only afterwards (the tokens of
// a response, counted when it ends).
//
// The result is that of a peek (Decide with quantity 0) at the new TAT:
// Allowed reports that the key is within its limit after the charge (so
// that a charge that Decide would have admitted answers exactly what
// Decide answers), and when it is not, RetryAfter is the time until the
// debt has drained and the key is at its limit again (a request for q
// units is then admitted q intervals later), Remaining is 0, and
// ResetAfter, the time until the bucket is full again, covers the whole
// debt. A quantity of 0 charges nothing and is a peek.
//
// A negative quantity is ErrNegative, and a cost or a TAT that does not
// fit in an int64 of nanoseconds is ErrOverflow; either returns tat
// unchanged.
func Charge(now, tat int64, p Params, quantity int64) (int64, Result, error) {
	if quantity < 0 {
		return tat, Result{}, ErrNegative
	}
	inc, ok := mul(p.Interval, quantity)
	if !ok {
		return tat, Result{}, ErrOverflow
	}
	newTAT := tat
	if quantity > 0 {
		base := max(now, tat)
		if base > math.MaxInt64-inc {
			return tat, Result{}, ErrOverflow
		}
		newTAT = base + inc
	}
	_, r, err := Decide(now, newTAT, p, 0)
	return newTAT, r, err
}

// Probe reports whether a request for quantity units at now would be
// admitted by a key whose TAT is tat, and if not after how long
// (RetryAfter, or Never when quantity is above the limit), charging
// nothing: the state is not returned because it does not change.
// Remaining and ResetAfter are those of the key as it is (a peek's).
// Errors are Decide's.
func Probe(now, tat int64, p Params, quantity int64) (Result, error) {
	if quantity < 0 {
		return Result{}, ErrNegative
	}
	_, r, err := Decide(now, tat, p, quantity)
	if err != nil || !r.Allowed || quantity == 0 {
		return r, err
	}
	_, r, err = Decide(now, tat, p, 0)
	return r, err
}
