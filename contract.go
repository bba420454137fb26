package funnel

import (
	"errors"
	"fmt"

	"github.com/funnelrl/funnel/algo"
)

// MaxLeaseIDLen is the longest lease id of a concurrency limit, in bytes:
// every store refuses a longer one (CheckOps), and every edge says so in
// its own words before it asks.
const MaxLeaseIDLen = 1024

// errAlone is CheckOps's error for a refund, a charge or a peek of N units
// among other ops, by op kind.
var errAlone = [...]error{
	OpRefund: errors.New("funnel: a refund must be the only op of its call"),
	OpCharge: errors.New("funnel: a charge must be the only op of its call"),
	OpPeek:   errors.New("funnel: a peek of N units (OpPeek) must be the only op of its call"),
}

// CheckOps reports whether a call of Store.Do with ops and res keeps the
// contract that Store.Do states, and returns the error a store answers
// when it does not: fewer results than ops; an unknown op kind or
// algorithm; a limit whose parameters Limit.Check did not compute (it
// wraps ErrInvalidLimit); a refund, a charge or an OpPeek among other ops;
// a charge or an OpPeek of a Concurrency limit (ErrInvalidLimit); a
// negative N anywhere
// but in a funnel's (GCRA's) lone take without a ban, or a release's
// latency out of range (both wrap ErrInvalidQuantity); a lease id longer
// than MaxLeaseIDLen (ErrInvalidLimit); a key that repeats
// (ErrDuplicateKey). Every store calls it before it applies a call, so that
// both stores refuse the same calls with the same errors; a store's path
// for the commonest call (one funnel take without a ban) may test the same
// rules inline instead.
func CheckOps(ops []Op, res []Result) error {
	if len(res) < len(ops) {
		return fmt.Errorf("funnel: %d results for %d ops", len(res), len(ops))
	}
	alone := len(ops) == 1
	var seen map[string]struct{} // for many keys; a few are compared in turn
	if len(ops) > 16 {
		seen = make(map[string]struct{}, len(ops))
	}
	for i := range ops {
		op := &ops[i]
		if err := op.check(alone); err != nil {
			return err
		}
		dup := false
		if seen != nil {
			_, dup = seen[op.Key]
			seen[op.Key] = struct{}{}
		} else {
			for j := range i {
				dup = dup || ops[j].Key == op.Key
			}
		}
		if dup {
			return fmt.Errorf("%w: %q", ErrDuplicateKey, op.Key)
		}
	}
	return nil
}

// errByQuantity is the error of a charge or a peek of N units of a
// concurrency limit l, which takes leases instead.
func errByQuantity(l *Limit) error {
	return fmt.Errorf("%w %v: a concurrency limit is not charged or peeked by quantity (take leases with Acquire)", ErrInvalidLimit, *l)
}

// check is CheckOps's test of one op, alone in its call or not.
func (op *Op) check(alone bool) error {
	if op.Kind > OpPeek {
		return fmt.Errorf("funnel: unknown op kind %d", op.Kind)
	}
	if op.Kind != OpTake && !alone {
		return errAlone[op.Kind]
	}
	c := &op.Limit
	if (op.Kind == OpCharge || op.Kind == OpPeek) && c.Algorithm == Concurrency {
		return errByQuantity(&c.Limit)
	}
	if c.Algorithm == Concurrency && (op.Latency < 0 || op.Latency > algo.MaxUnitDelay) {
		return fmt.Errorf("%w: latency %v is not within 0 to %v", ErrInvalidQuantity, op.Latency, algo.MaxUnitDelay)
	}
	if c.Algorithm == Concurrency && len(op.Lease) > MaxLeaseIDLen {
		return fmt.Errorf("%w: a lease id is at most %d bytes, got %d", ErrInvalidLimit, MaxLeaseIDLen, len(op.Lease))
	}
	if c.Algorithm == Concurrency && op.Kind == OpRefund {
		return nil // a release needs only the lease's key and id, and its latency
	}
	if op.N < 0 && !(alone && op.Kind == OpTake && c.Algorithm == GCRA && c.Ban == 0) {
		// Only a funnel without a ban takes units back this way, alone.
		return fmt.Errorf("%w %d: %w", ErrInvalidQuantity, op.N, algo.ErrNegative)
	}
	var ok bool
	switch c.Algorithm {
	case GCRA, LeakyBucket:
		ok = c.GCRA.Interval > 0
	case FixedWindow:
		ok = c.Window.Count > 0 && (c.Window.Period > 0 || c.Calendar != NoCalendar)
	case SlidingWindow, SlidingLog, Concurrency:
		ok = c.Window.Count > 0 && c.Window.Period > 0
	default:
		return fmt.Errorf("%w: unknown algorithm %v", ErrInvalidLimit, c.Algorithm)
	}
	if !ok {
		return fmt.Errorf("%w %v: parameters not computed by Limit.Check", ErrInvalidLimit, c.Limit)
	}
	return nil
}

// Capacity returns the Limit of a result under c: the units a full bucket
// admits at once (Burst+1) for the funnel and the leaky bucket, Count+Burst
// leases for Concurrency, and Count for the windows.
func (c *Checked) Capacity() int64 {
	switch c.Algorithm {
	case GCRA, LeakyBucket:
		return c.GCRA.Limit
	case Concurrency:
		return c.Window.Count + c.Burst
	}
	return c.Window.Count
}

// ResultOfAlgo converts a result of package algo's decisions, under a
// limit whose Capacity is capacity, to a Result.
func ResultOfAlgo(capacity int64, r algo.Result) Result {
	return Result{
		Allowed:    r.Allowed,
		Limit:      capacity,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
		Delay:      r.Delay,
	}
}
