// Package gcra is the funnel's pure decision: the generic cell rate algorithm
// ("leaky bucket as a meter") in integer nanoseconds.
//
// The package reads no clock, takes no lock and does no I/O. Every store and
// every protocol of Funnel calls Decide, so they all agree to the nanosecond.
// The arithmetic reproduces redis-cell's CL.THROTTLE (limit = burst+1, a
// request landing exactly on the boundary is allowed, nothing is charged when
// refused, a negative quantity gives units back), except that inputs for
// which redis-cell overflows are refused with an error and change nothing,
// and a refund never moves the state past a full bucket.
//
// Per key the only state is the theoretical arrival time (TAT) in nanoseconds.
// A TAT at or before now is the same as no state at all, so a store may forget
// a key as soon as its TAT has passed.
package gcra

import (
	"errors"
	"math"
	"math/bits"
	"time"
)

// Errors returned by NewParams and Decide. Each leaves the key unchanged.
var (
	// ErrZeroRate means the count or the period is zero, or the emission
	// interval period/count truncates to zero nanoseconds.
	ErrZeroRate = errors.New("gcra: zero rates are not supported")
	// ErrNegative means a burst, count or period is negative, or the
	// quantity of a Charge or a Probe.
	ErrNegative = errors.New("gcra: burst, count and period must not be negative")
	// ErrOverflow means interval·(burst+1), interval·|quantity| or the new
	// theoretical arrival time does not fit in an int64 of nanoseconds.
	ErrOverflow = errors.New("gcra: value overflows int64 nanoseconds")
)

// Never is the RetryAfter of a refused request that no amount of waiting
// would admit, because its quantity is above the limit.
const Never = time.Duration(math.MaxInt64)

// Params are the precomputed parameters of one funnel. The zero value is not
// valid; build Params with NewParams. Params are small values, safe to copy
// and to share between goroutines.
type Params struct {
	// Burst is redis-cell's max_burst: the bucket holds Burst+1 units.
	Burst int64
	// Limit is Burst+1, the number of units a full bucket admits at once.
	Limit int64
	// Interval is the emission interval T = period/count in nanoseconds: the
	// time one unit takes to leak out of the bucket.
	Interval int64
	// Tolerance is the delay variation tolerance T·Limit in nanoseconds: the
	// time a full bucket takes to drain.
	Tolerance int64
}

// NewParams returns the parameters of a funnel that admits count units per
// period with burst extra units (redis-cell's max_burst: a full bucket admits
// burst+1 units at once).
//
// The emission interval is period/count truncated to whole nanoseconds,
// computed in float64 as redis-cell computes it (for every period under 104
// days this equals the integer quotient); any interval of at least one
// nanosecond is exact. Errors, in the order they are checked: ErrZeroRate,
// ErrNegative, ErrOverflow.
func NewParams(burst, count int64, period time.Duration) (Params, error) {
	if count == 0 || period == 0 {
		return Params{}, ErrZeroRate
	}
	t := truncFloat(float64(period) / float64(count))
	if t == 0 {
		return Params{}, ErrZeroRate
	}
	if burst < 0 || count < 0 || period < 0 {
		return Params{}, ErrNegative
	}
	if burst == math.MaxInt64 {
		return Params{}, ErrOverflow
	}
	limit := burst + 1
	dvt, ok := mul(t, limit)
	if !ok {
		return Params{}, ErrOverflow
	}
	return Params{Burst: burst, Limit: limit, Interval: t, Tolerance: dvt}, nil
}

// truncFloat converts f to int64 as Rust's `as i64` does: toward zero,
// saturating at the int64 bounds (Go leaves out-of-range conversions
// implementation-defined).
func truncFloat(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= math.MaxInt64: // float64(MaxInt64) is 2^63
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// Cost returns the cost of quantity units under p, p.Interval·quantity in
// nanoseconds (negative for a refund), or ErrOverflow when its magnitude
// does not fit in an int64.
func Cost(p Params, quantity int64) (int64, error) {
	if quantity < 0 {
		if quantity == math.MinInt64 {
			return 0, ErrOverflow
		}
		c, ok := mul(p.Interval, -quantity)
		if !ok {
			return 0, ErrOverflow
		}
		return -c, nil
	}
	c, ok := mul(p.Interval, quantity)
	if !ok {
		return 0, ErrOverflow
	}
	return c, nil
}

// mul returns a·b and whether it fits in an int64; a and b are not negative.
// It multiplies in 128 bits rather than dividing to check, which keeps the
// hot path free of a division.
func mul(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// Result is the outcome of one decision, in exact nanoseconds.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Remaining is how many more units could be admitted right now after this
	// decision: the free capacity (Tolerance - ResetAfter) divided by the
	// interval, rounded down; never negative and never above the limit.
	// (redis-cell rounds both operands to whole microseconds first; package
	// cell reproduces that from ResetAfter for its wire format.)
	Remaining int64
	// RetryAfter is zero when allowed; when refused, the time until the same
	// request would be admitted, or Never if its quantity exceeds the limit.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again (the key's state
	// is then the same as absent).
	ResetAfter time.Duration
}

// Decide applies a request for quantity units at time now (nanoseconds since
// an epoch shared by all calls for the key) to a key whose theoretical arrival
// time is tat. A key without state has tat 0, or any value at or before now.
//
// It returns the key's new TAT and the result. When the request is refused,
// or err is not nil, the returned TAT equals tat and nothing must be stored.
// A quantity of 0 is a peek: it is always allowed and does not move the TAT.
//
// A negative quantity is a refund (redis-cell's idiom for giving back
// unused units): the TAT moves back by |quantity| intervals, but never to
// before now, so that a refund past an empty bucket leaves a full bucket
// (the returned TAT is then now, the same state as an absent key) and the
// result is that of a full bucket. A refund is refused only when the key's
// state is beyond the tolerance of p even after it (the limit was lowered),
// and then its RetryAfter is real.
//
// Decide is DecideNoRemaining completed by Params.Remaining.
func Decide(now, tat int64, p Params, quantity int64) (newTAT int64, r Result, err error) {
	newTAT, r, err = DecideNoRemaining(now, tat, p, quantity)
	if err == nil {
		r.Remaining = p.Remaining(r.ResetAfter)
	}
	return
}

// DecideNoRemaining is Decide without the one division of a decision: it
// returns what Decide returns, except that the result's Remaining is 0;
// p.Remaining(r.ResetAfter) is the Remaining that Decide returns (when err is
// nil).
//
// It is for a store that publishes the new TAT with a compare-and-swap: on
// amd64 a locked instruction waits until every instruction before it has
// completed, so a division computed before the compare-and-swap delays it by
// the division's latency, where one computed after it overlaps it.
func DecideNoRemaining(now, tat int64, p Params, quantity int64) (int64, Result, error) {
	if quantity < 0 {
		return refund(now, tat, p, quantity)
	}
	inc, ok := mul(p.Interval, quantity)
	if !ok {
		return tat, Result{}, ErrOverflow
	}
	base := tat
	if now > tat {
		base = now
	}
	var r Result
	ttl := base - now // time until the bucket is full, before this request
	switch {
	case inc > p.Tolerance:
		// More than a full bucket: no wait would admit it.
		r.RetryAfter = Never
	case ttl > p.Tolerance-inc:
		// Admitted once now reaches base + inc - Tolerance.
		r.RetryAfter = time.Duration(ttl - (p.Tolerance - inc))
	default:
		if base > math.MaxInt64-inc {
			return tat, Result{}, ErrOverflow
		}
		r.Allowed = true
		tat = base + inc
		ttl += inc
	}
	r.ResetAfter = time.Duration(ttl)
	return tat, r, nil
}

// AdmitOne is DecideNoRemaining's commonest decision, small enough for the
// compiler to inline into a store's fast path: a request for one unit at
// now on a key whose TAT is tat, admitted. It returns the key's new TAT
// and the result's ResetAfter, as DecideNoRemaining(now, tat, p, 1) does,
// and ok; ok is false, with nothing decided, when that request is not
// admitted or is an error (DecideNoRemaining then says which). The tests
// hold the two to the same decisions.
func AdmitOne(now, tat int64, p Params) (newTAT int64, resetAfter time.Duration, ok bool) {
	inc := p.Interval // the cost of one unit
	base := max(tat, now)
	ttl := base - now // time until the bucket is full, before this request
	if inc < 0 || inc > p.Tolerance || ttl > p.Tolerance-inc || base > math.MaxInt64-inc {
		return tat, 0, false
	}
	return base + inc, time.Duration(ttl + inc), true
}

// Remaining returns the Remaining of a decision under p that leaves the
// bucket full again after resetAfter (its ResetAfter): the free capacity
// p.Tolerance - resetAfter divided by p.Interval, rounded down, or 0 when
// there is none.
func (p Params) Remaining(resetAfter time.Duration) int64 {
	if next := p.Tolerance - int64(resetAfter); next > 0 {
		return next / p.Interval
	}
	return 0
}

// refund is DecideNoRemaining for a negative quantity: the TAT moves back by
// the cost, never to before now.
func refund(now, tat int64, p Params, quantity int64) (int64, Result, error) {
	inc, err := Cost(p, quantity) // negative
	if err != nil {
		return tat, Result{}, err
	}
	ttl := max(tat, now) - now // time until the bucket is full, before this request
	var r Result
	if ttl-p.Tolerance > -inc {
		// Still beyond the tolerance after the refund (the key was charged
		// under a larger limit): refused, as a charge would be. (Written
		// so that Tolerance - inc cannot overflow.)
		r.RetryAfter = time.Duration(ttl - p.Tolerance + inc)
	} else {
		r.Allowed = true
		ttl = max(ttl+inc, 0) // a refund past an empty bucket leaves a full one
		tat = now + ttl
	}
	r.ResetAfter = time.Duration(ttl)
	return tat, r, nil
}
