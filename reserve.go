package funnel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Reservations: a cost known only afterwards, admitted at its estimate and
// settled at its actual amount (the tokens of an LLM call: reserve
// max_tokens, settle the tokens used).

// DefaultReservationTTL is how long a reservation lives when Reserve is
// given no TTL: long enough for a slow streamed response.
const DefaultReservationTTL = 10 * time.Minute

// MaxReservationTTL is the longest TTL of a reservation.
const MaxReservationTTL = 24 * time.Hour

// ErrUnknownReservation is wrapped by the error of a Settle whose
// reservation the store does not hold: never made, refused, made for
// another key, or ended with its TTL (when a reservation that was never
// settled was settled at its estimate, and a settled one forgotten).
// Nothing changes.
var ErrUnknownReservation = errors.New("funnel: unknown or expired reservation")

// Reservation is a cost admitted at its estimate by Reserve, to be settled
// at its actual amount by Settle.
type Reservation struct {
	// Key is the key the estimate was taken from.
	Key string
	// ID names the reservation for Settle: random, unique to the store.
	ID string
	// Estimate is the units taken.
	Estimate int64
	// TTL is how long the reservation lives from Reserve: unsettled by then,
	// it is settled at its estimate (nothing more is charged or given back)
	// and forgotten; settled, it is remembered until then, so that a
	// second Settle says so.
	TTL time.Duration
}

// Settlement is the answer of Settle.
type Settlement struct {
	// Result is the key after the settle under the reservation's limit, as
	// a Charge answers: Allowed reports that the key is within its limit,
	// and when it is not, RetryAfter is the time until its debt has
	// drained.
	Result
	// Estimate is the reservation's estimate.
	Estimate int64
	// Actual is the amount the reservation was settled at: the first
	// Settle's, when Again.
	Actual int64
	// Again reports that the reservation was settled before: this Settle
	// changed nothing.
	Again bool
}

// ReserveStore is implemented by a Store that keeps reservations (Reserve
// and Settle) with its keys' state: the memory store, the Redis store, and
// the wrappers of a store (metrics, tracing, leases), which pass it
// through with ForwardReserve and ForwardSettle.
//
// A reservation is a record beside its key's state (in the same shard of
// the memory store and its snapshots; in the key's hash slot on Redis) that
// holds the estimate, the limit (EncodeLimit), the millisecond it was taken
// at (for a sliding log, the millisecond its entries were recorded at, see
// algo.LogDecide; for the others the store's now at the take, rounded
// down), for a funnel or a leaky bucket the key's TAT just after the take,
// and the end of its TTL, and, once settled, the actual amount. It
// is forgotten when its TTL ends, settled or not, so pending state is
// bounded by the TTLs.
//
// Settle at actual, with d = actual − estimate, applied at the store's now
// under the recorded limit, in one atomic step with marking the record
// settled:
//   - d = 0 changes no state;
//   - d > 0 is an OpCharge of d (into debt, a ban started as a charge
//     starts it);
//   - d < 0 gives back g = −d units, but only what the key still counts
//     of the estimate: the funnel and the leaky bucket as OpRefund (the
//     TAT moves back g intervals, never before now), but never by more
//     than the TAT the take left less now (the estimate's units that have
//     drained are counted no longer, and the key may hold others' units in
//     their place: algo.FunnelGiveBack; the bound errs on the side of the
//     limit: a key that stayed queued since the reserve is given back
//     less than the exact difference, nothing once that TAT has passed);
//     a fixed window only when now is in the window that holds the
//     reservation's millisecond (algo.FixedGiveBack); a sliding window counter from the current
//     window's count when the reservation's millisecond is in the current
//     window, from the previous window's when it is in the previous one,
//     and not at all when it is older (never below zero); neither window
//     from the state of a later window, which the clock stepped back
//     counts as the current one's but which holds none of the
//     reservation's units (algo.SlidingGiveBack); a sliding log
//     drops up to g entries recorded at the reservation's millisecond,
//     unless it is over its count, where a charge may have dropped
//     entries that cannot be told from the reservation's
//     (algo.LogGiveBack): then nothing.
//
// The Settlement's Result is then what an OpCharge of 0 (a peek) at now
// answers under the recorded limit. A key that now holds another
// algorithm's state is an error that wraps ErrWrongType; a debt that does
// not fit is an error that wraps gcra's or algo's ErrOverflow (which
// Limiter.Settle wraps in ErrInvalidQuantity); both change nothing and
// leave the reservation unsettled.
type ReserveStore interface {
	// Reserve takes estimate units of key under limit as OpTake does
	// (bans, a leaky bucket's Delay and every error included) and, when
	// they are admitted, records the reservation id for ttl. The caller
	// has checked the call with CheckReserve.
	Reserve(ctx context.Context, key string, limit Checked, estimate int64, id string, ttl time.Duration) (Result, error)
	// Settle settles reservation id of key at actual units (see
	// Limiter.Settle) in one atomic step with the charge or the refund of
	// the difference. The caller has checked actual (at least 0).
	Settle(ctx context.Context, key, id string, actual int64) (Settlement, error)
}

// ErrNoReserve is the error of Reserve and Settle on a store that keeps no
// reservations (a wrapper over a store that is not a ReserveStore).
var ErrNoReserve = errors.New("funnel: the store does not keep reservations")

// ReserveOf returns s as a ReserveStore, and false when it is not one.
func ReserveOf(s Store) (ReserveStore, bool) {
	r, ok := s.(ReserveStore)
	return r, ok
}

// ForwardReserve is the Reserve method of a store that wraps inner:
// inner's Reserve, or ErrNoReserve when inner keeps no reservations.
func ForwardReserve(ctx context.Context, inner Store, key string, limit Checked, estimate int64, id string, ttl time.Duration) (Result, error) {
	r, ok := ReserveOf(inner)
	if !ok {
		return Result{}, ErrNoReserve
	}
	return r.Reserve(ctx, key, limit, estimate, id, ttl)
}

// ForwardSettle is the Settle method of a store that wraps inner: inner's
// Settle, or ErrNoReserve when inner keeps no reservations.
func ForwardSettle(ctx context.Context, inner Store, key, id string, actual int64) (Settlement, error) {
	r, ok := ReserveOf(inner)
	if !ok {
		return Settlement{}, ErrNoReserve
	}
	return r.Settle(ctx, key, id, actual)
}

// CheckReserve reports whether a ReserveStore's Reserve call keeps the
// contract, and returns the error a store answers when it does not: a
// limit whose parameters Limit.Check did not compute or a Concurrency limit
// (ErrInvalidLimit); an estimate under 1 (ErrInvalidQuantity); an id that
// is empty or longer than MaxLeaseIDLen (ErrInvalidLimit); a ttl that is
// not whole milliseconds from 1 ms to MaxReservationTTL
// (ErrInvalidQuantity); a time zone that LoadLocation does not load by its
// name, such as a time.FixedZone, or time.Local, whose name each process
// reads as its own zone (ErrInvalidLimit: the record names the zone). Both stores call it first, so that they refuse the
// same calls with the same errors.
func CheckReserve(key string, limit *Checked, estimate int64, id string, ttl time.Duration) error {
	if limit.Algorithm == Concurrency {
		return fmt.Errorf("%w %v: a concurrency limit is not reserved (take leases with Acquire)", ErrInvalidLimit, limit.Limit)
	}
	if estimate < 1 {
		return fmt.Errorf("%w %d: a reservation's estimate is at least 1 unit", ErrInvalidQuantity, estimate)
	}
	if id == "" || len(id) > MaxLeaseIDLen {
		return fmt.Errorf("%w: a reservation id is 1 to %d bytes, got %d", ErrInvalidLimit, MaxLeaseIDLen, len(id))
	}
	if ttl < time.Millisecond || ttl > MaxReservationTTL || ttl%time.Millisecond != 0 {
		return fmt.Errorf("%w: a reservation's ttl %v is not whole milliseconds from 1ms to %v", ErrInvalidQuantity, ttl, MaxReservationTTL)
	}
	if loc := limit.Location; loc != nil {
		// The record names the zone (EncodeLimit): a zone that no name
		// loads (time.FixedZone) could not be read back, and "Local" would
		// be read back as the reader's own zone.
		if l, err := LoadLocation(loc.String()); err != nil || l.String() != loc.String() || loc == time.Local {
			return fmt.Errorf("%w %v: a reservation's time zone must be an IANA zone that LoadLocation loads by its name", ErrInvalidLimit, limit.Limit)
		}
	}
	op := Op{Kind: OpTake, Key: key, Limit: *limit, N: estimate}
	return op.check(true)
}

// Reserve takes estimate units of key under limit, as AllowN does, for a
// cost known only afterwards, and returns the reservation that Settle
// settles at the actual cost: the tokens of an LLM call, reserved at its
// max_tokens when the request arrives and settled at the tokens it used
// when the response ends. A refused Reserve takes nothing and returns a
// Reservation whose ID is empty.
//
// ttl is how long the reservation lives: 0 means DefaultReservationTTL,
// another is rounded up to whole milliseconds, and a negative one or one
// above MaxReservationTTL is an error that wraps ErrInvalidQuantity. A
// reservation never settled within its ttl is settled at its estimate:
// what was taken stays taken, nothing more is charged, and the
// reservation is forgotten, so that no pending state leaks and no
// reservation holds more than its estimate.
//
// estimate is at least 1. Concurrency limits are not reserved
// (ErrInvalidLimit); the store must keep reservations (ReserveStore: the
// memory and Redis stores do), or the error is ErrNoReserve. A store
// that cannot decide in time answers its fallback (Result.Fallback), and
// records no reservation.
func (l *Limiter) Reserve(ctx context.Context, key string, limit Limit, estimate int64, ttl time.Duration) (Reservation, Result, error) {
	c, err := limit.check()
	if err != nil {
		return Reservation{}, Result{}, err
	}
	switch {
	case ttl == 0:
		ttl = DefaultReservationTTL
	case ttl > 0 && ttl%time.Millisecond != 0:
		ttl = ttl.Truncate(time.Millisecond) + time.Millisecond
	}
	id, err := newLeaseID()
	if err != nil {
		return Reservation{}, Result{}, err
	}
	if err := CheckReserve(key, &c, estimate, id, ttl); err != nil {
		return Reservation{}, Result{}, err
	}
	rs, ok := ReserveOf(l.store)
	if !ok {
		return Reservation{}, Result{}, ErrNoReserve
	}
	r, err := rs.Reserve(ctx, key, c, estimate, id, ttl)
	if err != nil {
		return Reservation{}, Result{}, quantityError(estimate, err)
	}
	if l.obs != nil && notable(&r) {
		l.obs.Observe(ctx, key, c, r)
	}
	if !r.Allowed || r.Fallback {
		return Reservation{}, r, nil
	}
	return Reservation{Key: key, ID: id, Estimate: estimate, TTL: ttl}, r, nil
}

// Settle settles reservation id of key at actual units, the cost the work
// turned out to have, in one atomic step: actual above the estimate charges
// the difference as Charge does (into debt if need be); below it, gives
// the difference back (never past a full bucket, and only what the key
// still counts of the estimate: not a funnel's units that have drained
// since the reserve, a fixed window's units given back only in
// the window they were taken in, a sliding window's from the window they
// were counted in, a sliding log's from the reservation's own entries,
// and not while it is over its count).
// The Settlement says the key's state after it, under the reservation's
// limit, as Charge answers.
//
// Settle is idempotent: a reservation settled before is not settled again
// (Settlement.Again, with the first Settle's Actual, and nothing changes).
// An unknown or expired id (its TTL ended: an unsettled reservation was
// then settled at its estimate) is an error that wraps
// ErrUnknownReservation. A negative actual, or one whose debt does not
// fit, is an error that wraps ErrInvalidQuantity; then nothing changes
// and the reservation can still be settled. A store that cannot record
// the settle fails with an error that wraps ErrUnavailable (it is not a
// decision, and has no fallback); it may be retried, and settles once.
func (l *Limiter) Settle(ctx context.Context, key, id string, actual int64) (Settlement, error) {
	if err := checkN(actual); err != nil {
		return Settlement{}, err
	}
	if id == "" || len(id) > MaxLeaseIDLen {
		return Settlement{}, fmt.Errorf("%w: %q of key %q", ErrUnknownReservation, trunc(id), key)
	}
	rs, ok := ReserveOf(l.store)
	if !ok {
		return Settlement{}, ErrNoReserve
	}
	st, err := rs.Settle(ctx, key, id, actual)
	if err != nil {
		return Settlement{}, quantityError(actual, err)
	}
	return st, nil
}
