package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
)

// Reservations (funnel.ReserveStore). A reservation is a string key of
// its own in its key's hash slot (see reserveKeys), written by the take
// that admits it and read by its settles, in the same calls of
// family.lua (kinds 'v' and 'e': see settle.lua, giveback.lua and
// record.lua). Redis forgets it when its TTL ends.

var _ funnel.ReserveStore = (*Store)(nil)

// reservePrefix is the part of reservation keys after the slot tag and the
// store prefix.
const reservePrefix = "rsv:"

// reserveKeys returns the ban key of key (see banKey) and the key of its
// reservation id, in the same hash slot (or Ring shard): "{tag}" + prefix
// + "rsv:" + len(id) + ":" + id + key, which no other pair of a key and an
// id shares.
func (s *Store) reserveKeys(key, id string) (bk, rk string, err error) {
	bk, err = s.banKey(key)
	if err != nil {
		return "", "", err
	}
	tag := bk[:len(bk)-len(s.prefix)-len(banPrefix)-len(key)] // "{tag}"
	return bk, tag + s.prefix + reservePrefix + strconv.Itoa(len(id)) + ":" + id + key, nil
}

// Reserve takes estimate units of key under limit as Do takes them (one
// OpTake: bans, a leaky bucket's Delay, the same errors) and, when they
// are admitted, records reservation id for ttl beside the key, in the
// same script call (see funnel.ReserveStore). An id that a live
// reservation of key holds, settled or not, is refused (ErrInvalidLimit)
// and nothing changes. When Redis cannot be reached in time it answers
// the fallback and records nothing.
func (s *Store) Reserve(ctx context.Context, key string, limit funnel.Checked, estimate int64, id string, ttl time.Duration) (funnel.Result, error) {
	if err := funnel.CheckReserve(key, &limit, estimate, id, ttl); err != nil {
		return funnel.Result{}, err
	}
	ops := []funnel.Op{{Kind: funnel.OpTake, Key: key, Limit: limit, N: estimate}}
	bk, rk, err := s.reserveKeys(key, id)
	if err != nil {
		return funnel.Result{}, err
	}
	a, err := s.opArgs(ops[0])
	if err != nil {
		return funnel.Result{}, err
	}
	a[0] = "v"
	args, err := s.familyArgs()
	if err != nil {
		return funnel.Result{}, err
	}
	args = append(args, "1")
	args = append(args, a...)
	args = append(args, limb(ttl.Milliseconds()), reserveRecord(&limit, estimate, a))
	v, err := s.evalTimed(ctx, familyScript, []string{s.prefix + key, bk, rk}, args)
	if err != nil {
		if errors.Is(err, funnel.ErrWrongType) || errors.Is(err, errInternal) || errors.Is(err, errClock) {
			return funnel.Result{}, err
		}
		if err := callerDone(ctx); err != nil {
			return funnel.Result{}, err
		}
		s.fallbacks.Add(1)
		s.failed(err)
		return funnel.Result{Fallback: true, Allowed: s.failOpen, Limit: limit.Capacity()}, nil
	}
	if len(v) == 3 && v[2] == -2 {
		return funnel.Result{}, fmt.Errorf("%w: reservation id %q of key %q is in use", funnel.ErrInvalidLimit, id, key)
	}
	res := make([]funnel.Result, 1)
	if err := decodeFamily(v, ops, res); err != nil {
		return funnel.Result{}, err
	}
	return res[0], nil
}

// reserveRecord returns the fields of a reservation's record from the
// estimate on (see settle.lua): the estimate and a funnel's interval on
// two limbs, the algorithm, the ban and the take's parameters (a, the
// take's arguments, from the algorithm on), the funnel's cost left out;
// then the limit. A calendar window gets the span after the take's three,
// so that a settle a day later still finds its window among them.
func reserveRecord(c *funnel.Checked, estimate int64, a []string) string {
	var b strings.Builder
	b.Grow(128)
	w := func(v string) {
		b.WriteString(v)
		b.WriteByte(' ')
	}
	w(limb(estimate / 1e9))
	w(limb(estimate % 1e9))
	w(limb(c.GCRA.Interval / 1e9))
	w(limb(c.GCRA.Interval % 1e9))
	w(a[1])
	w(a[3])
	w(a[4])
	params := a[5:]
	if c.Algorithm == funnel.GCRA || c.Algorithm == funnel.LeakyBucket {
		params = params[2:] // the tolerance
	}
	for _, p := range params {
		w(p)
	}
	if c.Algorithm == funnel.FixedWindow && c.Calendar != funnel.NoCalendar {
		end, _ := strconv.ParseInt(a[len(a)-1], 10, 64)
		next := c.Limit.Span(end * int64(time.Millisecond))
		w(limb(next.Start))
		w(limb(next.End))
	}
	s := b.String()
	return s[:len(s)-1] + "\n" + funnel.EncodeLimit(c.Limit)
}

// Settle settles key's reservation id at actual units in one script call
// (see funnel.ReserveStore): the charge of actual − estimate, or the give
// back of estimate − actual, and the record marked settled. When Redis
// cannot be reached in time, the error wraps funnel.ErrUnavailable (the
// settle may be retried: it applies once).
func (s *Store) Settle(ctx context.Context, key, id string, actual int64) (funnel.Settlement, error) {
	if actual < 0 {
		return funnel.Settlement{}, fmt.Errorf("%w %d: %w", funnel.ErrInvalidQuantity, actual, algo.ErrNegative)
	}
	if id == "" || len(id) > funnel.MaxLeaseIDLen {
		return funnel.Settlement{}, fmt.Errorf("%w: an id of %d bytes, of key %q", funnel.ErrUnknownReservation, len(id), key)
	}
	bk, rk, err := s.reserveKeys(key, id)
	if err != nil {
		return funnel.Settlement{}, err
	}
	args, err := s.familyArgs()
	if err != nil {
		return funnel.Settlement{}, err
	}
	args = append(args, "1", "e", limb(actual/1e9), limb(actual%1e9))
	v, err := s.evalTimed(ctx, familyScript, []string{s.prefix + key, bk, rk}, args)
	if err != nil {
		if errors.Is(err, funnel.ErrWrongType) || errors.Is(err, errInternal) || errors.Is(err, errClock) {
			return funnel.Settlement{}, err
		}
		if err := callerDone(ctx); err != nil {
			return funnel.Settlement{}, err
		}
		s.reload()
		return funnel.Settlement{}, fmt.Errorf("redisstore: %w: %w", funnel.ErrUnavailable, err)
	}
	return decodeSettle(v, key, id, actual)
}

// decodeSettle computes the Settlement from a settle's reply: now, the six
// integers of a charge (of the units the actual exceeds the estimate by,
// or of 0), whether the reservation was settled before, the actual units
// and the estimate on two limbs, and the limit (its bytes: see runner).
func decodeSettle(v []int64, key, id string, actual int64) (funnel.Settlement, error) {
	if len(v) == 3 && v[2] == -1 {
		return funnel.Settlement{}, fmt.Errorf("%w: %q of key %q", funnel.ErrUnknownReservation, id, key)
	}
	if len(v) == 3 && v[2] == -3 {
		return funnel.Settlement{}, fmt.Errorf("%w: reservation %q of key %q: its Redis key holds something else", errInternal, id, key)
	}
	if len(v) < 13 {
		return funnel.Settlement{}, fmt.Errorf("%w: settle reply %v", errInternal, v)
	}
	b := make([]byte, len(v)-13)
	for i, c := range v[13:] {
		if c < 0 || c > 255 {
			return funnel.Settlement{}, fmt.Errorf("%w: settle reply %v", errInternal, v)
		}
		b[i] = byte(c)
	}
	l, err := funnel.DecodeLimit(string(b))
	if err != nil {
		return funnel.Settlement{}, fmt.Errorf("%w: reservation %q of key %q: %w", errInternal, id, key, err)
	}
	c, err := l.Check()
	if err != nil {
		return funnel.Settlement{}, fmt.Errorf("%w: reservation %q of key %q: %w", errInternal, id, key, err)
	}
	_, first, err1 := decodeLimbs(0, v[9], v[10])
	_, estimate, err2 := decodeLimbs(0, v[11], v[12])
	if err1 != nil || err2 != nil || (v[8] != 0 && v[8] != 1) {
		return funnel.Settlement{}, fmt.Errorf("%w: settle reply %v", errInternal, v)
	}
	st := funnel.Settlement{Estimate: estimate, Actual: actual, Again: v[8] == 1}
	op := funnel.Op{Kind: funnel.OpCharge, Key: key, Limit: c}
	if st.Again {
		st.Actual = first
	} else if actual > estimate {
		op.N = actual - estimate
	}
	// (A charge that does not fit is gcra's or algo's ErrOverflow, which
	// Limiter.Settle wraps in ErrInvalidQuantity.)
	res := make([]funnel.Result, 1)
	if err := decodeFamily(v[:8], []funnel.Op{op}, res); err != nil {
		return funnel.Settlement{}, err
	}
	st.Result = res[0]
	return st, nil
}
