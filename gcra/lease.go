package gcra

import (
	"errors"
	"fmt"
)

// MaxLeaseTolerance is the largest tolerance (in nanoseconds) of a funnel
// that Lease takes, about 52 days: the Redis script that reproduces Lease
// computes a lease's size in doubles, which are exact below 2^53.
const MaxLeaseTolerance = 1 << 52

// ErrBadLease is the error of a lease request that Lease refuses.
var ErrBadLease = errors.New("gcra: bad lease request")

// LeaseRequest asks a shared funnel for a block of units at once, and
// gives back the unused tail of the asker's previous block.
type LeaseRequest struct {
	// Want is the most units to take (at least 1).
	Want int64
	// Min is the fewest units worth taking (1 to Want): when fewer fit,
	// none are taken.
	Min int64
	// BackEnd is the TAT that the asker's previous lease left, and
	// BackUnits how many of its units went unspent (0 for none). They go
	// back only if the key's TAT is still BackEnd, that is when no other
	// charge came after that lease; otherwise they are forfeited.
	BackEnd, BackUnits int64
}

// Lease takes up to req.Want units of a key's funnel at time now, as that
// many admissions at now would, for a caller that then spends them from
// memory: the block of units that fits in the tolerance, or nothing when
// fewer than req.Min fit. Before it does, it gives back the previous
// lease's unspent tail if the key's TAT is still that lease's end (a
// compare-and-set: a blind give-back after another caller's charge would
// admit more than the funnel does). The TAT never moves back to before now.
//
// It returns the key's new TAT, which is tat unchanged (nothing to store)
// when nothing was given back or taken, and the number of units granted.
// The units of a lease spent later than now shift admissions later in
// time; a caller that spends them up to L after now must lease under a
// tolerance shrunk by L (see package leasestore) for every admission to
// stay within the funnel's.
func Lease(now, tat int64, p Params, req LeaseRequest) (int64, int64, error) {
	if err := checkLease(p, req); err != nil {
		return tat, 0, err
	}
	if req.BackUnits > 0 && req.BackEnd > 0 && tat == req.BackEnd {
		// BackUnits·Interval fits: the units came from this tolerance.
		tat = max(tat-req.BackUnits*p.Interval, now)
	}
	base := max(tat, now)
	d := base - now
	if d > p.Tolerance {
		return tat, 0, nil
	}
	n := min(req.Want, (p.Tolerance-d)/p.Interval)
	if n < req.Min {
		return tat, 0, nil
	}
	return base + n*p.Interval, n, nil
}

// checkLease validates a lease request under p.
func checkLease(p Params, req LeaseRequest) error {
	switch {
	case p.Interval <= 0 || p.Tolerance < p.Interval:
		return fmt.Errorf("%w: interval %d ns, tolerance %d ns", ErrBadLease, p.Interval, p.Tolerance)
	case p.Tolerance > MaxLeaseTolerance:
		return fmt.Errorf("%w: tolerance %d ns is above %d ns", ErrBadLease, p.Tolerance, int64(MaxLeaseTolerance))
	case req.Want < 1 || req.Min < 1 || req.Min > req.Want:
		return fmt.Errorf("%w: want %d, min %d", ErrBadLease, req.Want, req.Min)
	case req.BackUnits < 0 || req.BackEnd < 0:
		return fmt.Errorf("%w: give back %d units from %d", ErrBadLease, req.BackUnits, req.BackEnd)
	case req.BackUnits > p.Tolerance/p.Interval:
		return fmt.Errorf("%w: give back %d units, more than the funnel holds", ErrBadLease, req.BackUnits)
	}
	return nil
}
