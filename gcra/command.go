package gcra

//lint:file-ignore ST1005 the error texts are Redis's replies, capital letters included.

import (
	"errors"
	"math"
)

// Redis's own GCRA command (src/gcra.c of Redis, since 8.8.0):
//
//	GCRA key max_burst tokens_per_period period [TOKENS count]
//
// It is the same algorithm as Decide, in whole microseconds and with
// Redis's own rounding: the emission interval is period/tokens_per_period
// rounded to the nearest microsecond (at least one), the key's state is the
// TAT in microseconds, retry and reset after are rounded up to whole
// seconds, and remaining is computed from the time to the TAT as the C code
// does, limited or not. The functions below are that C function, line for
// line, with the time as an argument: CommandParams holds what depends only
// on the arguments, DecideCommand what depends on the key and the time.

// Errors of the GCRA command, with Redis's texts (the server writes "ERR "
// before them). Each leaves the key unchanged.
var (
	// ErrCommandArgs means NewCommandParams was given values that the
	// command's parser refuses: a negative max_burst, a tokens_per_period or
	// count under 1, a period not within (0, 1e12). The parser answers
	// those with Redis's own texts first.
	ErrCommandArgs = errors.New("gcra: GCRA arguments out of range")
	// ErrCommandTokensOverflow means interval·count, or the new TAT, does
	// not fit in an int64 of microseconds.
	ErrCommandTokensOverflow = errors.New("GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow")
	// ErrCommandBurstOverflow means interval·(max_burst+1) does not fit in
	// an int64 of microseconds.
	ErrCommandBurstOverflow = errors.New("GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow")
	// ErrCommandInvalidKey means the key holds a string that is not a
	// decimal int64 (Redis's string2ll: no sign but '-', no leading zero, no
	// space, at most 20 bytes). DecideCommand never returns it: the store
	// that reads the key does.
	ErrCommandInvalidKey = errors.New("Invalid GCRA key")
	// ErrCommandNegativeTime means the key holds an integer that is not
	// positive.
	ErrCommandNegativeTime = errors.New("Negative time is invalid value for GCRA")
)

// MaxCommandPeriod is the bound of the command's period in seconds: a
// period must be above 0 and under it.
const MaxCommandPeriod = 1e12

// CommandParams are the parameters of one call of the GCRA command, in
// microseconds. Build them with NewCommandParams; they are small values,
// safe to copy.
type CommandParams struct {
	// Limit is max_burst+1 (max_burst itself when it is math.MaxInt64): the
	// second integer of the reply, and the tokens a full bucket holds.
	Limit int64
	// Interval is the emission interval in microseconds, at least 1.
	Interval int64
	// Increment is Interval·count, the cost of the request; Variance is
	// Interval·Limit, the time a full bucket takes to drain. Both are 0
	// when Overflow is set.
	Increment int64
	Variance  int64
	// Overflow is ErrCommandTokensOverflow or ErrCommandBurstOverflow when
	// Increment or Variance does not fit in an int64, else nil. The command
	// reports it only after it has read the key (a key of the wrong type is
	// reported first), so DecideCommand returns it.
	Overflow error
}

// NewCommandParams computes the parameters of GCRA key maxBurst
// tokensPerPeriod period TOKENS tokens, as the C code does: the period in
// microseconds is period·1e6 in float64, the interval that divided by
// tokensPerPeriod, plus 0.5, truncated (so rounded to the nearest
// microsecond), and 1 if that is 0. The error is ErrCommandArgs for values
// the command's parser refuses (see there); an overflow is not an error
// here but CommandParams.Overflow.
func NewCommandParams(maxBurst, tokensPerPeriod int64, period float64, tokens int64) (CommandParams, error) {
	if maxBurst < 0 || tokensPerPeriod < 1 || tokens < 1 || !(period > 0 && period < MaxCommandPeriod) {
		return CommandParams{}, ErrCommandArgs
	}
	limit := maxBurst
	if limit < math.MaxInt64 {
		limit++
	}
	periodUs := float64(period * 1e6)
	interval := int64(float64(periodUs/float64(tokensPerPeriod)) + 0.5)
	if interval == 0 {
		interval = 1
	}
	p := CommandParams{Limit: limit, Interval: interval}
	switch {
	case interval > math.MaxInt64/tokens:
		p.Overflow = ErrCommandTokensOverflow
	case interval > math.MaxInt64/limit:
		p.Overflow = ErrCommandBurstOverflow
	default:
		p.Increment = interval * tokens
		p.Variance = interval * limit
	}
	return p, nil
}

// CommandReply is the reply of the GCRA command: five integers.
type CommandReply struct {
	// Limited reports that the request was refused (and nothing stored).
	Limited bool
	// Limit is max_burst+1.
	Limit int64
	// Remaining is the number of tokens available now, from the time to the
	// TAT (after the request when allowed, before it when limited), as the
	// C code computes it: it is not clamped to [0, Limit] (a key whose TAT
	// is in the past shows more).
	Remaining int64
	// RetryAfter is, when limited, the seconds until the request would be
	// admitted, rounded up; -1 when allowed or when count exceeds Limit
	// (no wait would admit it).
	RetryAfter int64
	// ResetAfter is the seconds until the bucket is full again, rounded up
	// (at or below 0 for a TAT in the past).
	ResetAfter int64
}

// Ints returns the reply as the command writes it: limited (0 or 1), limit,
// remaining, retry after, reset after.
func (r CommandReply) Ints() [5]int64 {
	limited := int64(0)
	if r.Limited {
		limited = 1
	}
	return [5]int64{limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter}
}

// DecideCommand decides a call of the GCRA command at time now, in
// microseconds since the Unix epoch (Redis's command time: whole
// milliseconds times 1000), on a key that holds the TAT tat in microseconds
// when exists, or nothing. It returns the TAT to store, the reply, and
// whether to store: when stored is true the key must be set to the decimal
// TAT, expiring at the millisecond TAT/1000 (Redis's SET key tat PXAT
// tat/1000); otherwise nothing changes. It reads no clock and does no I/O.
//
// Errors, in the command's order after the key was read: a stored TAT that
// is not positive (ErrCommandNegativeTime), p.Overflow, and a new TAT past
// 2^63-1 µs (ErrCommandTokensOverflow). A refused request is not an error.
func DecideCommand(now, tat int64, exists bool, p CommandParams) (newTAT int64, r CommandReply, stored bool, err error) {
	if exists {
		if tat <= 0 {
			return 0, CommandReply{}, false, ErrCommandNegativeTime
		}
	} else {
		tat = now
	}
	if p.Overflow != nil {
		return 0, CommandReply{}, false, p.Overflow
	}
	if p.Interval < 1 || p.Limit < 1 {
		return 0, CommandReply{}, false, ErrCommandArgs // not built by NewCommandParams
	}
	base := max(now, tat)
	if math.MaxInt64-base < p.Increment {
		return 0, CommandReply{}, false, ErrCommandTokensOverflow
	}
	newTAT = base + p.Increment
	allowAt := newTAT - p.Variance
	diff := now - allowAt
	r = CommandReply{Limit: p.Limit, RetryAfter: -1}
	var ttl int64
	if diff < 0 {
		r.Limited = true
		if p.Increment <= p.Variance {
			r.RetryAfter = int64(math.Ceil(float64(-diff) / 1e6))
		}
		ttl = tat - now
	} else {
		ttl = newTAT - now
		stored = true
	}
	if next := p.Variance - ttl; next > -p.Interval {
		r.Remaining = next / p.Interval
	}
	r.ResetAfter = int64(math.Ceil(float64(ttl) / 1e6))
	if !stored {
		newTAT = tat
	}
	return newTAT, r, stored, nil
}

// CommandExpiry returns the millisecond since the Unix epoch at which a key
// that holds the TAT tat (µs) expires: tat/1000, rounded down, as the
// command sets it (PXAT).
func CommandExpiry(tat int64) int64 { return tat / 1000 }
