package funnel

import (
	"context"
	"errors"
	"fmt"

	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// Charge records n units of key already spent under limit, whatever the key
// holds: the cost of work known only once it is done, such as the tokens of
// a response counted when it ends. Unlike AllowN it is never refused: the
// funnel's (and the leaky bucket's) theoretical arrival time advances by n
// intervals even past the tolerance, and a fixed or sliding window's count
// (or a sliding log) goes past its limit. The key is then in debt, and
// refused until the debt has drained, with the exact RetryAfter.
//
// The result is what a Peek answers after the charge. Allowed reports that
// the key is still within its limit, so that a charge that AllowN would
// have admitted answers exactly what AllowN answers. When the key is over
// its limit, Allowed is false, Remaining is 0, RetryAfter is the time until
// the debt has drained (a request for q units is admitted q intervals
// later for the funnel; when the window ends for a fixed window), and
// ResetAfter, the time until the key's state is empty, covers the whole
// debt, as does the key's expiry in every store. A fixed window's debt ends
// with its window; a sliding window's weighs on the next window as its
// counter does; a sliding log keeps only the newest Count+1 units of a
// debt (see algo.LogCharge).
//
// A charge on a banned key is recorded and answered Banned; one that
// leaves the key over a limit with a Ban starts the ban, as a refusal
// does. n = 0 charges nothing (a Peek). A negative n, or an n whose debt
// does not fit (a TAT beyond int64 nanoseconds; a window's count above
// algo.MaxCount), is an error that wraps ErrInvalidQuantity and changes
// nothing. Concurrency limits are not charged (ErrInvalidLimit). A charge
// is not a decision: a store that cannot record it fails with an error
// that wraps ErrUnavailable, never with a fallback result.
func (l *Limiter) Charge(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	return l.byQuantity(ctx, OpCharge, key, limit, n)
}

// PeekN reports whether n units of key would be admitted under limit now,
// and if not after how long, charging nothing: Allowed, and RetryAfter when
// refused (Never when n is above what a full bucket or a window admits,
// which no wait would change). Remaining and ResetAfter are those of the
// key as it is, as Peek reports them; for a leaky bucket, an admitted PeekN
// says the Delay that AllowN would ask for. A banned key answers Banned;
// a PeekN never starts a ban. PeekN(ctx, key, limit, 0) is Peek.
//
// The answer holds only until the next decision on the key: use AllowN to
// take the units. A negative n, or one whose cost overflows, is an error
// that wraps ErrInvalidQuantity; Concurrency limits are not peeked by
// quantity (ErrInvalidLimit).
func (l *Limiter) PeekN(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	if n == 0 {
		return l.AllowN(ctx, key, limit, 0)
	}
	return l.byQuantity(ctx, OpPeek, key, limit, n)
}

// byQuantity applies one OpCharge or OpPeek of n units of key under limit.
func (l *Limiter) byQuantity(ctx context.Context, kind OpKind, key string, limit Limit, n int64) (Result, error) {
	c, err := limit.check()
	if err != nil {
		return Result{}, err
	}
	if c.Algorithm == Concurrency {
		return Result{}, errByQuantity(&limit)
	}
	if err := checkN(n); err != nil {
		return Result{}, err
	}
	r, err := l.do1(ctx, kind, key, &c, n, "", 0)
	if err != nil {
		return Result{}, quantityError(n, err)
	}
	return r, nil
}

// quantityError wraps in ErrInvalidQuantity an error of a charge or a peek
// of n units that says the quantity does not fit.
func quantityError(n int64, err error) error {
	if (errors.Is(err, gcra.ErrOverflow) || errors.Is(err, algo.ErrOverflow)) && !errors.Is(err, ErrInvalidQuantity) {
		return fmt.Errorf("%w %d: %w", ErrInvalidQuantity, n, err)
	}
	return err
}
