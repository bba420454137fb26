package algo

import "time"

// Lease is one held unit of a concurrency limit: an ID chosen by the caller
// and the millisecond at which it expires unless released first.
type Lease struct {
	ID      string
	Expires int64
}

// MaxUnitDelay is the largest unit delay, default or reported latency of a
// concurrency limit that queues: one day. Every sum of two stays exact in
// a double.
const MaxUnitDelay = 24 * time.Hour

// ConcParams are the checked parameters of a concurrency limit: Count
// leases at once, each living Period ms, and Burst more that are granted
// with a delay (OpenResty limit.conn's max and burst).
type ConcParams struct {
	WindowParams
	// Burst is the number of leases beyond Count that are granted, each
	// told to wait; 0 refuses every lease beyond Count.
	Burst int64
	// Delay is the unit delay in ns: the key's own (see Leave) or, when it
	// has none, the limit's default. A lease granted when it makes conn
	// leases held, Count < conn, waits Delay × ⌊(conn − 1) / Count⌋.
	Delay int64
}

// NewConcParams checks a concurrency limit of count leases living period,
// burst more granted with a delay, and the default unit delay, and returns
// its parameters. Errors: those of NewWindowParams; ErrNegative for a
// negative burst or delay; ErrOverflow for count + burst above MaxCount or
// a delay above MaxUnitDelay.
func NewConcParams(count int64, period time.Duration, burst int64, delay time.Duration) (ConcParams, error) {
	w, err := NewWindowParams(count, period)
	if err != nil {
		return ConcParams{}, err
	}
	switch {
	case burst < 0 || delay < 0:
		return ConcParams{}, ErrNegative
	case burst > MaxCount-count || delay > MaxUnitDelay:
		return ConcParams{}, ErrOverflow
	}
	return ConcParams{WindowParams: w, Burst: burst, Delay: int64(delay)}, nil
}

// UnitDelay returns the unit delay of a key that keeps unit (0 when it has
// none of its own) under a limit whose default is def (ns).
func UnitDelay(unit, def int64) int64 {
	if unit > 0 {
		return unit
	}
	return def
}

// Leave returns a key's unit delay after a lease was released with the
// given latency (ns, 0 ≤ latency ≤ MaxUnitDelay): the mean of the latency
// and the unit delay it had (its own or the default), rounded down, and
// never below 1ns, so that a key's own unit delay is never 0 (which reads
// as none).
func Leave(unit, latency int64) int64 {
	return max(1, (unit+latency)/2)
}

// ConcDelay returns how long a lease granted as the conn-th one held must
// wait under p: 0 when conn ≤ Count, else Delay × ⌊(conn − 1) / Count⌋,
// never more than the lease's Period (a lease that waited longer would
// have expired before its request proceeds).
func ConcDelay(p ConcParams, conn int64) time.Duration {
	if conn <= p.Count || p.Delay <= 0 {
		return 0
	}
	k := (conn - 1) / p.Count
	limit := p.Period * msNS // ≤ MaxPeriod: no overflow
	if p.Delay > limit/k {
		return time.Duration(limit)
	}
	return time.Duration(p.Delay * k)
}

// Acquire applies a request for a lease id at now to a concurrency key that
// holds leases, under p. It returns the key's leases and the result.
//
// Expired leases (Expires ≤ now in ms: a lease expires exactly at its
// millisecond) no longer count. Acquiring an id that is held renews it for
// Period from now, even when Count + Burst leases are held, without a
// delay. Otherwise the lease is granted when fewer than Count + Burst are
// held, with the Delay of ConcDelay when it makes more than Count; when
// refused, RetryAfter is the time until enough held leases expire to leave
// room for one (a release may free one sooner). q must be 0 (a peek:
// allowed, nothing changes; its Delay is the one a new lease would get, 0
// when it would be refused) or 1; a larger q is refused with RetryAfter
// Never, as no lease id takes two units.
//
// A refused request, or a peek, returns leases itself, unmodified (expired
// leases included): nothing is to be stored. A granted one returns the live
// leases, compacted in leases's backing array: leases must not be used
// after that, only the returned slice.
func Acquire(now int64, leases []Lease, p ConcParams, id string, q int64) ([]Lease, Result, error) {
	if q < 0 {
		return leases, Result{}, ErrNegative
	}
	ms := Millis(now)
	var r Result
	n, held := int64(0), false
	for _, l := range leases {
		if l.Expires > ms {
			n++
			held = held || l.ID == id
		}
	}
	most := p.Count + p.Burst
	switch {
	case q == 0:
		r.Allowed = true
		if n < most {
			r.Delay = ConcDelay(p, n+1)
		}
	case q > 1:
		r.RetryAfter = Never
	case !held && n >= most:
		// Room for one once n−most+1 of the live leases have expired.
		r.RetryAfter = Until(now, kthExpiry(leases, ms, n-most+1))
	default:
		r.Allowed = true
		leases = dropExpired(leases, ms)
		if held {
			for i := range leases {
				if leases[i].ID == id {
					leases[i].Expires = ms + p.Period
					break
				}
			}
		} else {
			leases = append(leases, Lease{ID: id, Expires: ms + p.Period})
			n++
			r.Delay = ConcDelay(p, n)
		}
	}
	if n < most {
		r.Remaining = most - n
	}
	if n > 0 {
		last := int64(0)
		for _, l := range leases {
			last = max(last, l.Expires)
		}
		r.ResetAfter = Until(now, last)
	}
	return leases, r, nil
}

// kthExpiry returns the k-th earliest expiry (k ≥ 1, counting equal ones)
// among the leases that expire after ms. It allocates nothing; its cost, k
// passes over the leases, matters only when Count was lowered below the
// leases held.
func kthExpiry(leases []Lease, ms, k int64) int64 {
	after := ms // the expiries at or before after are counted
	for {
		next, count := int64(-1), int64(0)
		for _, l := range leases {
			switch {
			case l.Expires <= after:
			case next < 0 || l.Expires < next:
				next, count = l.Expires, 1
			case l.Expires == next:
				count++
			}
		}
		if next < 0 || count >= k {
			return next
		}
		k -= count
		after = next
	}
}

// Release drops the lease id at now, with the expired ones, and reports
// whether it was held (and not expired). It returns the leases to store,
// compacted in leases's backing array: leases must not be used after the
// call, only the returned slice.
func Release(now int64, leases []Lease, id string) ([]Lease, bool) {
	leases = dropExpired(leases, Millis(now))
	for i, l := range leases {
		if l.ID == id {
			leases = append(leases[:i], leases[i+1:]...)
			return leases, true
		}
	}
	return leases, false
}

// Holds reports whether the lease id is held (and not expired) at now.
func Holds(now int64, leases []Lease, id string) bool {
	ms := Millis(now)
	for _, l := range leases {
		if l.ID == id && l.Expires > ms {
			return true
		}
	}
	return false
}

// dropExpired removes, in place, the leases that expire at or before ms.
func dropExpired(leases []Lease, ms int64) []Lease {
	out := leases[:0]
	for _, l := range leases {
		if l.Expires > ms {
			out = append(out, l)
		}
	}
	return out
}

// Banned reports whether a key banned until the instant until (ns; 0 when
// never banned) is still banned at now, and for how long.
func Banned(now, Until int64) (bool, int64) {
	if Until > now {
		return true, Until - now
	}
	return false, 0
}
