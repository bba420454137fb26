package funnel

import (
	"context"
	"errors"

	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// The closed set of errors of Limiter and of every Store. An error a
// limiter or a store returns wraps one of these, one of package gcra's or
// algo's (the reason a limit or a quantity is invalid), or a context's
// error; anything else is a bug. ClassOf sorts them for the edges.
var (
	// ErrInvalidLimit is returned (wrapped, with the reason) for a Limit
	// that cannot be applied: see Limit.Validate.
	ErrInvalidLimit = errors.New("funnel: invalid limit")
	// ErrInvalidQuantity is returned (wrapped, with the reason) for a
	// negative quantity where none is taken, or one whose cost overflows
	// int64 nanoseconds.
	ErrInvalidQuantity = errors.New("funnel: invalid quantity")
	// ErrDuplicateKey means a key appears twice in one call.
	ErrDuplicateKey = errors.New("funnel: a key appears twice in one call")
	// ErrWrongType means a key holds the state of another algorithm than
	// the limit applied to it (or, in Redis, anything that is not a state
	// of Funnel's).
	ErrWrongType = errors.New("WRONGTYPE funnel: key holds the state of another algorithm")
	// ErrCrossSlot means the keys of one call cannot be decided together by
	// the store (on Redis Cluster they must share a {hash tag}).
	ErrCrossSlot = errors.New("CROSSSLOT funnel: keys of one call must share a {hash tag} on Redis Cluster")
	// ErrLeaseNotHeld means a release reported a latency for a lease that
	// is not held (never taken, released, or expired): the latency is not
	// counted and nothing changes.
	ErrLeaseNotHeld = errors.New("funnel: the lease is not held (released, expired or never taken)")
	// ErrUnavailable is wrapped by the errors of a store that cannot be
	// reached (a network store that is down or too slow).
	ErrUnavailable = errors.New("funnel: store unavailable")
)

// Class is what an error of a Limiter or a Store means to whoever asked:
// the one distinction every edge (RESP, HTTP, gRPC, middleware, metrics)
// makes before it maps the class to its own reply, in one place each.
type Class uint8

// The classes of errors, from ClassOf.
const (
	// ClassNone is a nil error.
	ClassNone Class = iota
	// ClassInvalid is a bad argument: an invalid limit or quantity, a key
	// twice in one call. The caller's mistake; its text is safe to send
	// and it is not logged.
	ClassInvalid
	// ClassWrongType is a key that holds another algorithm's state (or, in
	// Redis, a value that is not Funnel's). The caller's; not logged.
	ClassWrongType
	// ClassCrossSlot is keys that the store cannot decide together (Redis
	// Cluster without a shared {hash tag}). Whose mistake depends on who
	// chose the keys: a client of the HTTP API, or a server's rules.
	ClassCrossSlot
	// ClassUnavailable is a store that cannot decide now (down or too
	// slow). Logged at most once a second; its detail is never sent.
	ClassUnavailable
	// ClassCanceled is the caller's own context ending first: not the
	// store's failure, not logged.
	ClassCanceled
	// ClassInternal is anything else: a bug, logged, its detail never sent.
	ClassInternal
)

var classNames = [...]string{"none", "invalid", "wrong_type", "cross_slot", "unavailable", "canceled", "internal"}

// String returns the class's name in snake case, as metrics label it.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "internal"
}

// ClassOf returns the class of err, an error returned by a Limiter or a
// Store (or nil).
func ClassOf(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case errors.Is(err, ErrWrongType):
		return ClassWrongType
	case errors.Is(err, ErrCrossSlot):
		return ClassCrossSlot
	case errors.Is(err, ErrInvalidLimit), errors.Is(err, ErrInvalidQuantity), errors.Is(err, ErrDuplicateKey), errors.Is(err, ErrLeaseNotHeld), errors.Is(err, ErrUnknownReservation),
		errors.Is(err, gcra.ErrZeroRate), errors.Is(err, gcra.ErrNegative), errors.Is(err, gcra.ErrOverflow),
		errors.Is(err, algo.ErrZeroSize), errors.Is(err, algo.ErrNegative), errors.Is(err, algo.ErrPeriodTooShort),
		errors.Is(err, algo.ErrOverflow), errors.Is(err, algo.ErrTooManyEvents), isGCRACommandError(err):
		return ClassInvalid
	case errors.Is(err, ErrUnavailable):
		// Before the context's errors: a store's own timeout is an outage
		// even when it wraps context.DeadlineExceeded.
		return ClassUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ClassCanceled
	}
	return ClassInternal
}
