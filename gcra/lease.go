package gcra

import (
	"errors"
	"fmt"
)

// MaxLeaseTolerance is the largest tolerance (in nanoseconds) of a funnel
// that Lease takes, with its horizon added, about 52 days: the Redis script that reproduces Lease
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
	// Horizon (ns, at least 0) lets the lease take future-dated units:
	// slots of the funnel that fit only later, up to Horizon after now,
	// as admissions queued at now would take them. Unit j of a grant
	// conforms from its slot on (LeaseSlot), not before. 0 takes only
	// the units that fit now.
	Horizon int64
	// BackEnd is the TAT that the asker's previous lease left, and
	// BackUnits how many of its units went unspent (0 for none). They go
	// back only if the key's TAT is still BackEnd, that is when no other
	// charge came after that lease; otherwise they are forfeited.
	BackEnd, BackUnits int64
}

// Lease takes up to req.Want units of a key's funnel at time now, as that
// many admissions at now would, for a caller that then spends them from
// memory: the block of units that fits in the tolerance (extended by
// req.Horizon for future-dated units), or nothing when fewer than req.Min
// fit. Before it does, it gives back the previous
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
		// BackUnits·Interval fits: the units came from this headroom.
		tat = max(tat-req.BackUnits*p.Interval, now)
	}
	base := max(tat, now)
	d := base - now
	head := p.Tolerance + req.Horizon
	if d > head {
		return tat, 0, nil
	}
	n := min(req.Want, (head-d)/p.Interval)
	if n < req.Min {
		return tat, 0, nil
	}
	return base + n*p.Interval, n, nil
}

// LeaseSlot returns the slot of unit j (0 for the first) of a grant of n
// units whose TAT after the grant is end, made at now under p: the first
// instant at which that unit, taken as an admission at its slot, conforms
// to the funnel: max(now, end-(n-1-j)·Interval-Tolerance). A unit of a
// grant without a horizon has its slot at now; future-dated units have
// their slots one interval apart. Replayed at their slots, the units of
// every grant are admitted by the funnel p, in order, as the grants were
// made (see package leasestore).
func LeaseSlot(now, end, n, j int64, p Params) int64 {
	return max(now, end-(n-1-j)*p.Interval-p.Tolerance)
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
	case req.Horizon < 0 || req.Horizon > MaxLeaseTolerance-p.Tolerance:
		return fmt.Errorf("%w: horizon %d ns: tolerance plus horizon above %d ns", ErrBadLease, req.Horizon, int64(MaxLeaseTolerance))
	case req.BackUnits < 0 || req.BackEnd < 0:
		return fmt.Errorf("%w: give back %d units from %d", ErrBadLease, req.BackUnits, req.BackEnd)
	case req.BackUnits > (p.Tolerance+req.Horizon)/p.Interval:
		return fmt.Errorf("%w: give back %d units, more than the funnel holds", ErrBadLease, req.BackUnits)
	}
	return nil
}
