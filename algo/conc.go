package algo

// Lease is one held unit of a concurrency limit: an ID chosen by the caller
// and the millisecond at which it expires unless released first.
type Lease struct {
	ID      string
	Expires int64
}

// Acquire applies a request for a lease id at now to a concurrency key that
// holds leases, under p (Count leases at once, each living Period ms). It
// returns the key's leases and the result.
//
// Expired leases (Expires ≤ now in ms) are dropped first. Acquiring an id
// that is held renews it. Otherwise the lease is granted when fewer than
// Count are held; when refused, RetryAfter is the time until the first held
// lease expires (a release may free one sooner). q must be 0 (a peek) or 1.
//
// The returned slice may share leases's backing array.
func Acquire(now int64, leases []Lease, p WindowParams, id string, q int64) ([]Lease, Result, error) {
	if q < 0 {
		return leases, Result{}, ErrNegative
	}
	ms := Millis(now)
	leases = dropExpired(leases, ms)
	held := -1
	for i, l := range leases {
		if l.ID == id {
			held = i
			break
		}
	}
	var r Result
	n := int64(len(leases))
	switch {
	case q == 0:
		r.Allowed = true
	case q > 1:
		r.RetryAfter = Never
	case held >= 0:
		r.Allowed = true
		leases[held].Expires = ms + p.Period
	case n >= p.Count:
		first := leases[0].Expires
		for _, l := range leases[1:] {
			first = min(first, l.Expires)
		}
		r.RetryAfter = until(now, first)
	default:
		r.Allowed = true
		leases = append(leases, Lease{ID: id, Expires: ms + p.Period})
		n++
	}
	if n < p.Count {
		r.Remaining = p.Count - n
	}
	if n > 0 {
		last := leases[0].Expires
		for _, l := range leases[1:] {
			last = max(last, l.Expires)
		}
		r.ResetAfter = until(now, last)
	}
	return leases, r, nil
}

// Release drops the lease id at now, with the expired ones, and reports
// whether it was held.
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
func Banned(now, until int64) (bool, int64) {
	if until > now {
		return true, until - now
	}
	return false, 0
}
