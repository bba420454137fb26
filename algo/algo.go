// Package algo holds the pure decisions of Funnel's limiter family beyond the
// funnel itself (package gcra): the fixed window, the sliding window counter,
// the sliding window log, the delaying leaky bucket, concurrency leases and
// bans.
//
// Like gcra.Decide, every function here takes the time and the key's state as
// arguments and returns the new state and the result: no clock, no lock, no
// I/O. Stores (memory, Redis) apply them atomically per key; the Redis
// scripts are proven equal to them by the shared conformance suite.
//
// Time is int64 nanoseconds since the Unix epoch. The window algorithms and
// leases keep their state in whole milliseconds (now rounded down, except
// the sliding log's entries, rounded up), which is exact in the doubles of
// Redis's Lua; the durations they return are exact nanoseconds from now to
// a millisecond boundary.
package algo

import (
	"errors"
	"math"
	"time"
)

// Errors of the parameter constructors. Each leaves the key unchanged.
var (
	// ErrZeroSize means a count, or a period, is zero.
	ErrZeroSize = errors.New("algo: count and period must be positive")
	// ErrNegative means a count, period, delay, ban or quantity is negative.
	ErrNegative = errors.New("algo: count, period, delay, ban and quantity must not be negative")
	// ErrPeriodTooShort means a window or lease period is under one
	// millisecond, or not a whole number of milliseconds.
	ErrPeriodTooShort = errors.New("algo: window and lease periods must be whole milliseconds, at least 1ms")
	// ErrOverflow means a count, or count × period in milliseconds, is too
	// large to be computed exactly (see MaxCount and MaxWeight).
	ErrOverflow = errors.New("algo: count or count×period is too large")
	// ErrTooManyEvents means a sliding log's count is above MaxLogCount.
	ErrTooManyEvents = errors.New("algo: sliding log count is above MaxLogCount")
)

// Never is the RetryAfter of a refused request that no amount of waiting
// would admit, because its quantity is above the limit.
const Never = time.Duration(math.MaxInt64)

const (
	// MaxCount is the largest count of a window or concurrency limit: every
	// sum of counts stays exact in a double.
	MaxCount = 1 << 40
	// MaxWeight bounds (count+1) × period (in ms) of a sliding window
	// counter, so that the numerator prev × (period − elapsed) + period − 1
	// of its weighted estimate is exact in a double.
	MaxWeight = 1 << 53
	// MaxLogCount is the largest count of a sliding log, which keeps one
	// record per admitted unit.
	MaxLogCount = 1 << 20
	// MaxPeriod is the longest window or lease period: ten years.
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

const msNS = int64(time.Millisecond)

// Result is the outcome of one decision, in exact nanoseconds.
type Result struct {
	// Allowed reports whether the request was admitted (and charged).
	Allowed bool
	// Remaining is how many more units could be admitted right now.
	Remaining int64
	// RetryAfter is zero when allowed; when refused, the time until the same
	// request would be admitted (if nothing else happens meanwhile), or Never.
	RetryAfter time.Duration
	// ResetAfter is the time until the key holds no state again.
	ResetAfter time.Duration
	// Delay is, for the delaying leaky bucket only, how long an admitted
	// request must wait before it proceeds.
	Delay time.Duration
}

// Millis returns now in whole milliseconds, rounded down.
func Millis(now int64) int64 {
	ms := now / msNS
	if now%msNS < 0 {
		ms--
	}
	return ms
}

// CeilMillis returns now in whole milliseconds, rounded up.
func CeilMillis(now int64) int64 {
	ms := Millis(now)
	if now != ms*msNS {
		ms++
	}
	return ms
}

// Until returns the nanoseconds from now to the millisecond boundary ms,
// saturating at Never, and never negative.
func Until(now, ms int64) time.Duration {
	switch {
	case ms > math.MaxInt64/msNS:
		return Never
	case ms < math.MinInt64/msNS || ms*msNS <= now:
		return 0
	case now < 0 && ms*msNS > math.MaxInt64+now:
		return Never
	}
	return time.Duration(ms*msNS - now)
}

// WindowParams are the checked parameters of a window or concurrency limit:
// Count units per period of Period milliseconds.
type WindowParams struct {
	// Count is the number of units admitted per window (or leases held at
	// once).
	Count int64
	// Period is the window length (or the lease lifetime) in milliseconds.
	Period int64
}

// NewWindowParams checks count per period for the window algorithms and
// concurrency, and returns their parameters. Errors: ErrZeroSize,
// ErrNegative, ErrPeriodTooShort, ErrOverflow.
func NewWindowParams(count int64, period time.Duration) (WindowParams, error) {
	if count == 0 || period == 0 {
		return WindowParams{}, ErrZeroSize
	}
	if count < 0 || period < 0 {
		return WindowParams{}, ErrNegative
	}
	if period < time.Millisecond || period%time.Millisecond != 0 {
		return WindowParams{}, ErrPeriodTooShort
	}
	if count > MaxCount || period > MaxPeriod {
		return WindowParams{}, ErrOverflow
	}
	return WindowParams{Count: count, Period: int64(period / time.Millisecond)}, nil
}

// checkQuantity reports whether q is usable against count.
func checkQuantity(q int64) error {
	if q < 0 {
		return ErrNegative
	}
	return nil
}
