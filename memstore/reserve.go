package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
)

var _ funnel.ReserveStore = (*Store)(nil)

// resvKey names a reservation: its key and its id.
type resvKey struct{ key, id string }

// reservation is a pending or settled reservation, in its key's shard,
// read and written under the shard's lock until expires (ns), when the
// sweep drops it (and it reads as absent before that).
type reservation struct {
	limit    funnel.Checked
	estimate int64
	at       int64 // the millisecond the estimate was taken at (see funnel.ReserveStore)
	end      int64 // a funnel's or leaky bucket's TAT just after the take (ns)
	expires  int64
	settled  bool
	actual   int64
}

// Reserve takes estimate units of key under limit and, when they are
// admitted, records the reservation id until ttl has passed, in the
// key's shard and under its lock, in one step (funnel.ReserveStore).
// Reservations are not counted against MaxKeys (a pending one holds at
// least one unit of its key's limit, so a key's pending reservations are
// bounded by what the limit admits over their TTL; settled ones are not,
// see the package documentation); the sweep drops them when their TTL
// ends, and snapshots keep them.
func (s *Store) Reserve(_ context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	if err := funnel.CheckReserve(key, &limit, estimate, id, ttl); err != nil {
		return funnel.Result{}, err
	}
	op := funnel.Op{Kind: funnel.OpTake, Key: key, Limit: limit, N: estimate}
	k, _ := kindOf(limit.Algorithm)
	h, sh := s.hash(key)
	held := [1]*shard{sh}
	rk := resvKey{key, id}
	var res [1]funnel.Result
	for {
		one := [1]pending{{op: &op, sh: sh, h: h, kind: k}}
		sh.mu.Lock()
		now := s.Now()
		if rv := sh.resv[rk]; rv != nil && rv.expires > now {
			sh.mu.Unlock()
			return funnel.Result{}, fmt.Errorf("%w: reservation id %q of key %q is in use", funnel.ErrInvalidLimit, id, key)
		}
		if s.resCap > 0 && len(sh.resv) >= s.resCap && !sh.reservationRoom(now, s.resCap) {
			sh.mu.Unlock()
			return funnel.Result{}, ErrReservationsFull
		}
		err := s.apply(now, one[:], res[:], held[:])
		if err == nil && res[0].Allowed {
			at := algo.Millis(now)
			if k == kindLog {
				// The newest entries are the take's.
				at = one[0].st.times[len(one[0].st.times)-1]
			}
			// The key and the id may alias a buffer the caller reuses:
			// copied, in one allocation.
			both := key + id
			kept := resvKey{both[:len(key)], both[len(key):]}
			sh.addReservation(kept, &reservation{limit: limit, estimate: estimate, at: at, end: one[0].tat, expires: now + int64(ttl)})
		}
		sh.mu.Unlock()
		if err != errNoRoom {
			return res[0], err
		}
		if err := s.evictAnywhere(now, 1); err != nil {
			return funnel.Result{}, err
		}
	}
}

// ErrReservationsFull is the error of a Reserve in a shard that holds
// Options.MaxReservations pending reservations. It wraps
// funnel.ErrUnavailable: the store cannot decide, and changed nothing.
var ErrReservationsFull = fmt.Errorf("memstore: %w: the shard holds MaxReservations pending reservations; a new one is refused", funnel.ErrUnavailable)

// reservationRoom makes room for a reservation in sh, which holds limit
// or more: it drops those whose TTL has ended and, if that is not enough,
// settled ones (any: a settled record only tells a later settle Again)
// until sh holds an eighth less than limit, so that a shard kept full pays
// for the walk once per eighth of its reservations. It reports whether sh
// holds fewer than limit then. The caller holds the lock.
func (sh *shard) reservationRoom(now int64, limit int) bool {
	for k, rv := range sh.resv {
		if rv.expires <= now {
			delete(sh.resv, k)
		}
	}
	keep := limit - max(limit/8, 1)
	for k, rv := range sh.resv {
		if len(sh.resv) <= keep {
			break
		}
		if rv.settled {
			delete(sh.resv, k)
		}
	}
	return len(sh.resv) < limit
}

// addReservation records rv as rk. The caller holds the lock.
func (sh *shard) addReservation(rk resvKey, rv *reservation) {
	if sh.resv == nil {
		sh.resv = make(map[resvKey]*reservation)
	}
	sh.resv[rk] = rv
	sh.resPeak = max(sh.resPeak, len(sh.resv))
}

// Settle settles reservation id of key at actual units by the rule of
// funnel.ReserveStore, under the key's shard's lock: the charge or the
// give-back of the difference, and the record marked settled, in one step.
func (s *Store) Settle(_ context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	if actual < 0 {
		return funnel.Settlement{}, fmt.Errorf("%w %d: %w", funnel.ErrInvalidQuantity, actual, algo.ErrNegative)
	}
	h, sh := s.hash(key)
	held := [1]*shard{sh}
	for {
		sh.mu.Lock()
		now := s.Now()
		rv := sh.resv[resvKey{key, id}]
		if rv == nil || rv.expires <= now {
			sh.mu.Unlock()
			return funnel.Settlement{}, fmt.Errorf("%w: %q of key %q", funnel.ErrUnknownReservation, id, key)
		}
		st := funnel.Settlement{Estimate: rv.estimate, Actual: actual, Again: rv.settled}
		if rv.settled {
			st.Actual = rv.actual
		}
		err := s.settleLocked(now, sh, h, held[:], key, rv, actual, &st.Result)
		sh.mu.Unlock()
		if err == errNoRoom {
			if err := s.evictAnywhere(now, 1); err != nil {
				return funnel.Settlement{}, err
			}
			continue
		}
		if err != nil {
			return funnel.Settlement{}, err
		}
		return st, nil
	}
}

// settleLocked applies the settle of rv at actual (nothing when rv is
// settled), marks rv settled, and writes the key's state after it into r.
// The caller holds sh's lock. On an error nothing has changed.
func (s *Store) settleLocked(now int64, sh *shard, h uint64, held []*shard, key string, rv *reservation, actual int64, r *funnel.Result) error {
	k, _ := kindOf(rv.limit.Algorithm)
	d := actual - rv.estimate
	if rv.settled {
		d = 0
	}
	var ignored [1]funnel.Result
	if d < 0 {
		op := funnel.Op{Kind: funnel.OpRefund, Key: key, Limit: rv.limit, N: -d}
		one := [1]pending{{op: &op, sh: sh, h: h, kind: k, give: true, at: rv.at, tatAt: rv.end}}
		if err := s.apply(now, one[:], ignored[:], held); err != nil {
			return err
		}
		d = 0
	}
	// A charge of the rest (0: a peek, whose answer is the settle's).
	op := funnel.Op{Kind: funnel.OpCharge, Key: key, Limit: rv.limit, N: d}
	one := [1]pending{{op: &op, sh: sh, h: h, kind: k}}
	res := [1]funnel.Result{}
	if err := s.apply(now, one[:], res[:], held); err != nil {
		return err
	}
	*r = res[0]
	if !rv.settled {
		rv.settled, rv.actual = true, actual
	}
	return nil
}
