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
// Expired leases (Expires ≤ now in ms: a lease expires exactly at its
// millisecond) no longer count. Acquiring an id that is held renews it for
// Period from now, even when Count leases are held. Otherwise the lease is
// granted when fewer than Count are held; when refused, RetryAfter is the
// time until enough held leases expire to leave room for one (a release may
// free one sooner). q must be 0 (a peek: allowed, nothing changes) or 1; a
// larger q is refused with RetryAfter Never, as no lease id takes two units.
//
// A refused request, or a peek, returns leases itself, unmodified (expired
// leases included): nothing is to be stored. A granted one returns the live
// leases, compacted in leases's backing array: leases must not be used
// after that, only the returned slice.
func Acquire(now int64, leases []Lease, p WindowParams, id string, q int64) ([]Lease, Result, error) {
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
	switch {
	case q == 0:
		r.Allowed = true
	case q > 1:
		r.RetryAfter = Never
	case !held && n >= p.Count:
		// Room for one once n−Count+1 of the live leases have expired.
		r.RetryAfter = until(now, kthExpiry(leases, ms, n-p.Count+1))
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
		}
	}
	if n < p.Count {
		r.Remaining = p.Count - n
	}
	if n > 0 {
		last := int64(0)
		for _, l := range leases {
			last = max(last, l.Expires)
		}
		r.ResetAfter = until(now, last)
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
