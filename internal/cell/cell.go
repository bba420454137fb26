// Package cell is redis-cell compatibility: CL.THROTTLE's argument rules,
// error texts and 5-integer reply, on top of the exact decision of package
// gcra. Protocol adapters use it so that the rounding to seconds and the -1
// of the wire format live in one place.
package cell

//lint:file-ignore ST1005 the error texts are redis-cell's replies, capital letters included.

import (
	"errors"
	"math"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// Error texts of redis-cell, as they follow the "-" of a RESP error.
const (
	// UsageError is redis-cell's reply to a wrong number of arguments.
	UsageError = "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
	// ParseErrorPrefix precedes the verbatim argument that is not an i64.
	ParseErrorPrefix = "Cell error: Store error: Couldn't parse as integer: "
	// ZeroRateError is redis-cell's reply to a count or a period of zero.
	ZeroRateError = "Cell error: Store error: Zero rates are not supported"
)

// Errors for the inputs redis-cell accepts and mishandles; Funnel refuses
// them and changes nothing. Their texts keep redis-cell's "Cell" error code.
var (
	// ErrUsage is a wrong number of arguments.
	ErrUsage = errors.New(UsageError)
	// ErrZeroRate is a count or period of zero.
	ErrZeroRate = errors.New(ZeroRateError)
	// ErrRateTooHigh is a rate above one unit per nanosecond: period/count
	// truncates to an emission interval of zero. (redis-cell calls it a
	// zero rate, which the rate is not.)
	ErrRateTooHigh = errors.New("Cell error: rate too high: count per period must be at most 1000000000 per second (an emission interval period/count of at least 1ns)")
	// ErrNegative is a negative max_burst, count or period. (A negative
	// quantity is a refund.)
	ErrNegative = errors.New("Cell error: max_burst, count and period must not be negative")
	// ErrOverflow is a max_burst, period, or cost that overflows int64 ns.
	ErrOverflow = errors.New("Cell error: value overflows 64-bit nanoseconds")
)

// ParseError is an argument that is not a valid i64.
type ParseError struct {
	// Arg is the argument, verbatim.
	Arg string
}

// Error returns redis-cell's text for the argument.
func (e *ParseError) Error() string { return ParseErrorPrefix + e.Arg }

// ParseQuantity returns the quantity of CL.THROTTLE's arguments after the
// command name (key, max_burst, count, period and an optional quantity),
// 1 when it is absent, for a server that has parsed the same limit before
// and kept it: what ParseLimitInto would answer when its limit's arguments
// are valid.
func ParseQuantity(args [][]byte) (int64, error) {
	switch len(args) {
	case 4:
		return 1, nil
	case 5:
		q, ok := ParseInt(args[4])
		if !ok {
			return 0, &ParseError{Arg: string(args[4])}
		}
		return q, nil
	}
	return 0, ErrUsage
}

// ParseLimitInto parses the arguments of CL.THROTTLE after the command
// name, key max_burst count period [quantity], into the checked limit *c
// (left undefined on error) and returns the quantity (1 when omitted; a
// negative quantity is a refund, see gcra.Decide). The key counts only for
// the arity: a server uses it in place. The checks follow redis-cell's
// order: arity, then each integer in turn, then zero rates; then Funnel's
// own refusals (a rate above one unit per nanosecond, negative rates or
// bursts, overflow). It allocates nothing but an error.
func ParseLimitInto(args [][]byte, c *funnel.Checked) (int64, error) {
	if len(args) != 4 && len(args) != 5 {
		return 0, ErrUsage
	}
	var n [4]int64
	n[3] = 1
	for i, a := range args[1:] {
		v, ok := ParseInt(a)
		if !ok {
			return 0, &ParseError{Arg: string(a)}
		}
		n[i] = v
	}
	burst, count, period, quantity := n[0], n[1], n[2], n[3]
	if count == 0 || period == 0 {
		return 0, ErrZeroRate
	}
	if period > math.MaxInt64/int64(time.Second) || period < math.MinInt64/int64(time.Second) {
		// redis-cell computes in i128 here; a period this long
		// (over 292 years) has no int64 nanosecond form.
		if burst < 0 || count < 0 || period < 0 {
			return 0, ErrNegative
		}
		return 0, ErrOverflow
	}
	// A plain funnel: gcra.NewParams is the whole of Limit.Check, and its
	// errors come in redis-cell's order.
	c.Limit = funnel.Limit{Count: count, Period: time.Duration(period) * time.Second, Burst: burst}
	c.Window = algo.WindowParams{}
	p, err := gcra.NewParams(burst, count, c.Period)
	if err != nil {
		if errors.Is(err, gcra.ErrZeroRate) {
			// Neither count nor period is zero: period/count is under
			// 1 ns.
			if burst < 0 || count < 0 || period < 0 {
				return 0, ErrNegative
			}
			return 0, ErrRateTooHigh
		}
		return 0, Translate(err)
	}
	c.GCRA = p
	return quantity, nil
}

// Translate maps gcra's errors to this package's; others pass unchanged.
func Translate(err error) error {
	switch {
	case errors.Is(err, gcra.ErrZeroRate):
		return ErrZeroRate
	case errors.Is(err, gcra.ErrNegative):
		return ErrNegative
	case errors.Is(err, gcra.ErrOverflow):
		return ErrOverflow
	}
	return err
}

// ParseInt parses b as Rust's str::parse::<i64> does: an optional single
// leading '+' or '-', then one or more ASCII digits, within int64. It
// allocates nothing.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	switch b[0] {
	case '+':
		b = b[1:]
	case '-':
		neg = true
		b = b[1:]
	}
	if len(b) == 0 {
		return 0, false
	}
	if len(b) <= 18 {
		// Up to 18 digits cannot overflow: no test per digit.
		var v int64
		for _, c := range b {
			d := c - '0' // wraps above 9 for any byte below '0'
			if d > 9 {
				return 0, false
			}
			v = v*10 + int64(d)
		}
		if neg {
			v = -v
		}
		return v, true
	}
	// Accumulate negatively so that math.MinInt64 parses.
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if v < (math.MinInt64+d)/10 {
			return 0, false
		}
		v = v*10 - d
	}
	if !neg {
		if v == math.MinInt64 {
			return 0, false
		}
		v = -v
	}
	return v, true
}

// Seconds rounds d to whole seconds as redis-cell's reply does: d in
// seconds as a float64 (whole seconds plus nanoseconds/1e9, rounded to the
// nearest double), truncated toward zero, then one more if the sub-second
// part holds at least one whole millisecond. So 2s → 2, 2.001s → 3,
// 10ms → 1, 0.6ms → 0, -0.5s → 0; and from 2^24 s on, where a double has
// no room for the nanoseconds, a duration just under a whole second rounds
// up before the millisecond is added (72303342.999999993s → 72303344).
func Seconds(d time.Duration) int64 {
	sec, nsec := int64(d/time.Second), int64(d%time.Second)
	s := int64(float64(sec) + float64(nsec)/1e9)
	if nsec/int64(time.Millisecond) > 0 {
		s++
	}
	return s
}

// Remaining computes redis-cell's remaining from the exact time to reset:
// the free capacity tolerance - reset and the interval are each truncated to
// whole microseconds and divided in float64, truncating toward zero; 0 when
// the free capacity is not above -interval. Because of the truncation it can
// exceed the limit by a little, or show 1 on a refused request, exactly as
// redis-cell does.
//
// For an interval under one microsecond, where redis-cell divides by zero
// and answers 0 or 2^63-1, it is the exact quotient in nanoseconds instead:
// the free capacity divided by the interval, truncated toward zero.
func Remaining(p gcra.Params, reset time.Duration) int64 {
	next := p.Tolerance - int64(reset)
	if next <= -p.Interval {
		return 0
	}
	if p.Interval < int64(time.Microsecond) {
		return next / p.Interval
	}
	return int64(float64(next/1000) / float64(p.Interval/1000))
}

// Reply returns the 5 integers of CL.THROTTLE's reply for a result r under
// parameters p: limited (0 or 1), limit, remaining, retry_after in seconds
// (-1 when allowed or when the request can never be admitted) and
// reset_after in seconds.
func Reply(p gcra.Params, r funnel.Result) [5]int64 {
	out := [5]int64{1, p.Limit, Remaining(p, r.ResetAfter), -1, Seconds(r.ResetAfter)}
	if r.Allowed {
		out[0] = 0
	} else if r.RetryAfter != funnel.Never {
		out[3] = Seconds(r.RetryAfter)
	}
	return out
}
