package gcra

import (
	"fmt"
	"math"
)

// LeaseCommand is Lease on the key of Redis's GCRA command (see
// DecideCommand): it takes up to req.Want tokens of the key at once, as
// that many calls of one token at now would, for a caller that then spends
// them from memory, or none when fewer than req.Min fit. Everything is in
// the command's units: now, the TAT, req.Horizon and req.BackEnd in
// microseconds, a unit is p.Interval, and the funnel's tolerance is
// p.Variance (a caller that spends its units later leases under a smaller
// Variance, see package leasestore; p.Limit and p.Increment are not used).
//
// The key holds the TAT tat when exists, else nothing (an absent key reads
// as tat = now, as the command reads it). Before taking, it gives back the
// previous lease's unspent tail, req.BackUnits tokens, if the key still
// holds that lease's end req.BackEnd (a compare-and-set; an absent key
// holds nothing to compare). The TAT never moves back to before now.
//
// It returns the TAT to store and the tokens granted; when stored is false
// nothing changes (and newTAT is tat, or 0 for an absent key). A stored
// TAT is written as the command writes it: the decimal µs, expiring at the
// millisecond newTAT/1000 (CommandExpiry). A key that holds a TAT that is
// not positive is ErrCommandNegativeTime, parameters that overflow their
// p.Overflow, as for the command; a request out of range ErrBadLease; a
// new TAT past 2^63-1 µs ErrCommandTokensOverflow. It reads no clock and
// does no I/O.
func LeaseCommand(now, tat int64, exists bool, p CommandParams, req LeaseRequest) (newTAT, n int64, stored bool, err error) {
	unchanged := int64(0)
	if exists {
		if tat <= 0 {
			return 0, 0, false, ErrCommandNegativeTime
		}
		unchanged = tat
	} else {
		tat = now
	}
	if p.Overflow != nil {
		return 0, 0, false, p.Overflow
	}
	if err := checkCommandLease(p, req); err != nil {
		return 0, 0, false, err
	}
	if exists && req.BackUnits > 0 && req.BackEnd > 0 && tat == req.BackEnd {
		// BackUnits·Interval fits: the units came from this headroom.
		tat = max(tat-req.BackUnits*p.Interval, now)
		stored = true
	}
	base := max(tat, now)
	d := base - now
	head := p.Variance + req.Horizon
	if d <= head {
		if n = min(req.Want, (head-d)/p.Interval); n < req.Min {
			n = 0
		}
	}
	if n > 0 {
		if math.MaxInt64-base < n*p.Interval {
			return 0, 0, false, ErrCommandTokensOverflow
		}
		return base + n*p.Interval, n, true, nil
	}
	if stored {
		return tat, 0, true, nil
	}
	return unchanged, 0, false, nil
}

// CommandLeaseSlot is LeaseSlot for a grant of LeaseCommand: the first
// instant (µs) at which unit j of a grant of n tokens, whose TAT after the
// grant is end, made at now, conforms as a call of one token:
// max(now, end-(n-1-j)·Interval-Variance).
func CommandLeaseSlot(now, end, n, j int64, p CommandParams) int64 {
	return max(now, end-(n-1-j)*p.Interval-p.Variance)
}

// checkCommandLease validates a lease request on the command's key under p.
func checkCommandLease(p CommandParams, req LeaseRequest) error {
	switch {
	case p.Interval < 1 || p.Variance < p.Interval:
		return fmt.Errorf("%w: interval %d µs, variance %d µs", ErrBadLease, p.Interval, p.Variance)
	case p.Variance > MaxLeaseTolerance:
		return fmt.Errorf("%w: variance %d µs is above %d µs", ErrBadLease, p.Variance, int64(MaxLeaseTolerance))
	case req.Want < 1 || req.Min < 1 || req.Min > req.Want:
		return fmt.Errorf("%w: want %d, min %d", ErrBadLease, req.Want, req.Min)
	case req.Horizon < 0 || req.Horizon > MaxLeaseTolerance-p.Variance:
		return fmt.Errorf("%w: horizon %d µs: variance plus horizon above %d µs", ErrBadLease, req.Horizon, int64(MaxLeaseTolerance))
	case req.BackUnits < 0 || req.BackEnd < 0:
		return fmt.Errorf("%w: give back %d units from %d", ErrBadLease, req.BackUnits, req.BackEnd)
	case req.BackUnits > (p.Variance+req.Horizon)/p.Interval:
		return fmt.Errorf("%w: give back %d units, more than the funnel holds", ErrBadLease, req.BackUnits)
	}
	return nil
}
