// Package funnel is an exact rate limiter: a funnel ("leaky bucket as a
// meter", computed as GCRA) per key, served from an in-memory store or from
// Redis.
//
// A Limit says how many units a key may spend per period and how large a
// burst it may spend at once. A Limiter applies limits to keys through a
// Store:
//
//	lim := funnel.New(memstore.New(memstore.Options{}))
//	res, err := lim.Allow(ctx, "user:42", funnel.PerMinute(30).WithBurst(15))
//	if err == nil && !res.Allowed {
//		// refuse; res.RetryAfter says when to come back
//	}
//
// The decision itself lives in package gcra; its results agree to the
// nanosecond with redis-cell's CL.THROTTLE.
package funnel

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// Never is the RetryAfter of a refused request that no amount of waiting
// would admit, because its quantity is above the limit.
const Never = gcra.Never

// Limit is a rate limit: Count units per Period, with Burst extra units that
// may be spent at once. It is a small value type, safe to copy and compare.
//
// Burst has redis-cell's meaning (max_burst): a full bucket admits Burst+1
// units at once, and then one unit every Period/Count. The constructors set
// Burst to Count-1, so that PerMinute(30) admits 30 at once and then one every
// two seconds; use WithBurst to choose another burst.
//
// The zero Limit is not valid (it has no rate); IsZero reports it.
type Limit struct {
	// Count is the number of units that leak per Period.
	Count int64
	// Period is the time in which Count units leak.
	Period time.Duration
	// Burst is the number of units beyond the first that a full bucket admits
	// at once (redis-cell's max_burst), for the funnel (GCRA) and the leaky
	// bucket. For Concurrency it is the number of leases beyond Count that
	// are granted with a delay (OpenResty limit.conn's burst; see
	// UnitDelay); 0 refuses every lease beyond Count. The other algorithms
	// ignore it.
	Burst int64
	// Algorithm is how the limit admits requests; the zero value is the
	// funnel (GCRA). See Algorithm for each one's use of the other fields.
	Algorithm Algorithm
	// Calendar, for FixedWindow only, aligns windows to calendar days, weeks
	// (from Monday) or months in Location, instead of Period-long windows
	// aligned to the Unix epoch. Period is then ignored.
	Calendar Calendar
	// DelayUnits is, for LeakyBucket only, the number of excess units that
	// pass at once (nginx's delay=, the text form's "delay"); the rest of
	// the burst is delayed. 0 delays every excess unit; NoDelay (or any
	// value ≥ Burst) delays none. It counts units: how long a request
	// waits is Result.Delay.
	DelayUnits int64
	// UnitDelay is, for Concurrency only, the default unit delay of a key
	// (OpenResty limit.conn's default_conn_delay): a lease granted as the
	// conn-th one held, beyond Count, waits UnitDelay × ⌊(conn−1)/Count⌋
	// (Result.Delay), never more than Period. A key takes this default when
	// its first lease is granted; from then on the latencies that releases
	// report (Limiter.ReleaseAfter) move it, each to the mean of the
	// latency and the unit delay, until the key holds no lease again. At
	// most algo.MaxUnitDelay (a day).
	UnitDelay time.Duration
	// Location is the time zone of calendar windows; nil means UTC.
	Location *time.Location
	// Ban, when positive, turns an overflow into a ban: once a request for
	// the key is refused (peeks excepted), every request for the key under a
	// limit that has a Ban, peeks included, is refused for Ban, on every
	// server that shares the store (requests under limits without a Ban do
	// not look for bans, so that they cost nothing more). The refusal that
	// starts the ban, and
	// every refusal during it, has Result.Banned set, Remaining 0 and a
	// RetryAfter of the time left in the ban, or the limit's own RetryAfter
	// if that is longer. A refusal during a ban does not extend it.
	Ban time.Duration
}

// Per returns a limit of count units per period, with burst count-1.
func Per(count int64, period time.Duration) Limit {
	burst := count - 1
	if burst < 0 {
		burst = 0
	}
	return Limit{Count: count, Period: period, Burst: burst}
}

// PerSecond returns a limit of count units per second, with burst count-1.
func PerSecond(count int64) Limit { return Per(count, time.Second) }

// PerMinute returns a limit of count units per minute, with burst count-1.
func PerMinute(count int64) Limit { return Per(count, time.Minute) }

// PerHour returns a limit of count units per hour, with burst count-1.
func PerHour(count int64) Limit { return Per(count, time.Hour) }

// PerDay returns a limit of count units per 24 hours, with burst count-1.
func PerDay(count int64) Limit { return Per(count, 24*time.Hour) }

// WithBurst returns a copy of l with Burst set to burst (redis-cell's
// max_burst: a full bucket admits burst+1 units at once).
func (l Limit) WithBurst(burst int64) Limit {
	l.Burst = burst
	return l
}

// String formats l as "30 per 1m0s, burst 15" for the funnel, and with the
// algorithm and its options for the others, such as
// "fixed_window 1000 per calendar day in Europe/Paris, ban 1h0m0s".
func (l Limit) String() string {
	var s string
	switch l.Algorithm {
	case GCRA:
		s = fmt.Sprintf("%d per %v, burst %d", l.Count, l.Period, l.Burst)
	case LeakyBucket:
		s = fmt.Sprintf("%v %d per %v, burst %d", l.Algorithm, l.Count, l.Period, l.Burst)
		switch {
		case l.DelayUnits >= NoDelay:
			s += ", nodelay"
		case l.DelayUnits > 0:
			s += fmt.Sprintf(", delay %d", l.DelayUnits)
		}
	case Concurrency:
		s = fmt.Sprintf("%v %d, lease %v", l.Algorithm, l.Count, l.Period)
		if l.Burst != 0 || l.UnitDelay != 0 {
			s += fmt.Sprintf(", burst %d, unit delay %v", l.Burst, l.UnitDelay)
		}
	default:
		if l.Calendar != NoCalendar {
			s = fmt.Sprintf("%v %d per calendar %v", l.Algorithm, l.Count, l.Calendar)
			if l.Location != nil {
				s += " in " + l.Location.String()
			}
		} else {
			s = fmt.Sprintf("%v %d per %v", l.Algorithm, l.Count, l.Period)
		}
	}
	if l.Ban > 0 {
		s += fmt.Sprintf(", ban %v", l.Ban)
	}
	return s
}

// IsZero reports whether l is the zero Limit.
func (l Limit) IsZero() bool { return l == Limit{} }

// Validate reports whether l can be applied. The error wraps ErrInvalidLimit
// and the reason: for the funnel and the leaky bucket one of gcra's errors
// (zero count or period, or an emission interval Period/Count that
// truncates to 0 ns; a negative field; an interval·(Burst+1) that overflows
// int64 nanoseconds); for the others one
// of package algo's (zero or negative sizes, periods that are not whole
// milliseconds, counts too large to compute exactly); or an unknown
// algorithm or calendar, a negative Delay or Ban, or an option that the
// algorithm does not take.
func (l Limit) Validate() error {
	_, err := l.check()
	return err
}

// Params returns the precomputed GCRA parameters of a funnel or leaky bucket
// limit, or the error that Validate reports.
func (l Limit) Params() (gcra.Params, error) {
	if l.Algorithm != GCRA && l.Algorithm != LeakyBucket {
		return gcra.Params{}, fmt.Errorf("%w %v: %v has no GCRA parameters", ErrInvalidLimit, l, l.Algorithm)
	}
	return l.gcraParams()
}

// gcraParams returns the GCRA parameters of l.
func (l *Limit) gcraParams() (gcra.Params, error) {
	p, err := gcra.NewParams(l.Burst, l.Count, l.Period)
	if err != nil {
		return gcra.Params{}, fmt.Errorf("%w %v: %w", ErrInvalidLimit, *l, err)
	}
	return p, nil
}

// Result is the answer to one request.
type Result struct {
	// Allowed reports whether the request was admitted and charged. For
	// Charge, which is always charged, it reports that the key is still
	// within its limit after the charge; for PeekN, which charges nothing,
	// that the units would be admitted now.
	Allowed bool
	// Banned reports that the request was refused because the key is banned
	// (see Limit.Ban); RetryAfter is then the time until the ban ends.
	Banned bool
	// Fallback reports that the store could not decide (it was unreachable
	// or too slow) and Allowed is its configured fail-open (true) or
	// fail-closed (false) answer rather than a decision. Remaining,
	// RetryAfter and ResetAfter are then zero.
	Fallback bool
	// Limit is the number of units a full bucket admits at once (Burst+1).
	Limit int64
	// Remaining is how many more units could be admitted right now.
	Remaining int64
	// RetryAfter is zero when allowed. When refused it is the time after
	// which the same request would be admitted, or Never when its quantity
	// exceeds Limit. After a Charge that left the key over its limit, it
	// is the time until the debt has drained.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	// Delay is, for the leaky bucket and for a concurrency lease granted
	// within its burst, how long an admitted request must wait before it
	// proceeds (Limiter.Wait and Limiter.AcquireWait sleep it).
	Delay time.Duration
}

// fillResult sets the fields of *r, a zero Result, to the gcra result g
// under a limit of limit units (ResultOf's Result), one field at a time: a
// Result has more fields than the compiler keeps in registers, so a Result
// built aside and copied would be read back by wide loads of the narrow
// stores just made, which the processor cannot forward, and which wait
// for them.
func fillResult(r *Result, limit int64, g gcra.Result) {
	r.Allowed, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter = g.Allowed, limit, g.Remaining, g.RetryAfter, g.ResetAfter
}

// ResultOf converts a gcra result under parameters p to a Result.
func ResultOf(p gcra.Params, r gcra.Result) Result {
	return Result{
		Allowed:    r.Allowed,
		Limit:      p.Limit,
		Remaining:  r.Remaining,
		RetryAfter: r.RetryAfter,
		ResetAfter: r.ResetAfter,
	}
}

// Store applies decisions to keys: the one contract of every store (the
// memory store, the Redis store, and wrappers such as metrics'). A store
// decides every algorithm of the family; how it makes the common case fast
// (one funnel decision without a ban, lock-free in memory, batched on
// Redis) is its own affair, behind Do.
//
// Implementations must be safe for concurrent use, and apply each call
// atomically at the store's own current time (one clock for every caller
// of the store). Keys passed to a store may alias a buffer the caller
// reuses (a server's read buffer): a store copies a key it keeps, and keeps
// no key past the call otherwise.
type Store interface {
	// Do applies ops at the store's current time and writes their results
	// into res (len(res) ≥ len(ops)).
	//
	// One OpTake is a decision. A negative N is allowed only for the funnel
	// (GCRA) without a ban, alone in its call: it gives |N| units back, as
	// redis-cell's CL.THROTTLE does, never past a full bucket (see
	// gcra.Decide).
	//
	// Several OpTake ops are all-or-nothing: if every one is admitted all
	// are charged; otherwise none is, and each result says whether its op
	// alone would have been admitted: the refused ones with their
	// RetryAfter, the others Allowed with their state as it stays, as a
	// peek reports it (Delay 0). The ops are applied atomically as one: no
	// other decision sees a partial charge. A refusal still records the ban
	// of a limit with Ban > 0 (see Limit.Ban for a banned result). An
	// OpRefund is applied alone (one op per call); its result is Allowed
	// with the state it leaves, or for a release, Allowed when the lease
	// was held. Keys of one call must not repeat. A key whose state is
	// empty reads as absent whatever algorithm left it. A key that holds
	// another algorithm's state is an error that wraps ErrWrongType, and
	// changes nothing. A store that needs keys of one call to share
	// something (Redis Cluster: a hash slot) says so with an error that
	// wraps ErrCrossSlot, and may say which keys go together (Grouper).
	//
	// An OpCharge (units spent, recorded into debt if need be) and an
	// OpPeek (n units asked without a charge) are applied alone, as OpKind
	// says.
	//
	// A store that cannot decide in time either fails with an error that
	// wraps ErrUnavailable or answers its configured fallback (a result
	// with Fallback set); a refund or a charge, which is not a decision,
	// only fails.
	Do(ctx context.Context, ops []Op, res []Result) error
	// Reset forgets key, so that its next request finds a full bucket (an
	// empty state of any algorithm), and reports whether the key held
	// state. Resetting a key that has no state is not an error.
	Reset(ctx context.Context, key string) (bool, error)
	// TTL returns the time until key's state is empty (a funnel's bucket
	// is full again), and false when the key holds no state.
	TTL(ctx context.Context, key string) (time.Duration, bool, error)
	// Bans lists the keys banned now, with the time their ban ends.
	Bans(ctx context.Context) ([]Ban, error)
	// Unban lifts key's ban and reports whether it was banned.
	Unban(ctx context.Context, key string) (bool, error)
}

// FunnelTaker is what a Store may offer beside Do for the commonest call:
// one funnel (GCRA) take of n units of key without a ban, under parameters
// p from Limit.Check. TakeFunnel must decide exactly as Do decides that op
// (a negative n gives units back, as Do says), except that a quantity whose
// cost overflows is an error that wraps ErrInvalidQuantity, as the
// Limiter's methods say. It answers the decision as a gcra.Result, which
// the Limiter turns into the Result that Do would give (ResultOf: the
// Limit from p, no ban, no delay, no fallback); on an error the Result is
// zero. A store that may answer a fallback does not offer it.
//
// It spares the op and result buffers that cross Do, so that a Limiter over
// a store that offers it decides through no pooled buffer. It answers a
// gcra.Result rather than a Result because the compiler keeps a struct of
// four fields in registers across a call, where a Result's eight go through
// memory at every call that returns one. Every decision still goes through
// the Limiter, which uses it when the store has it.
//
// A store that wraps another and observes its decisions (metrics, traces,
// leases) must not pass its inner store's TakeFunnel through: the Limiter
// would then decide around the wrapper. A wrapper that only observes the
// results can offer ObservingStore instead: the Limiter then decides
// through the inner store's TakeFunnel and tells the wrapper's Observer.
type FunnelTaker interface {
	TakeFunnel(ctx context.Context, key string, p gcra.Params, n int64) (gcra.Result, error)
}

// Limiter applies limits to keys through a Store. It is safe for concurrent
// use; the zero Limiter is not usable, build one with New.
type Limiter struct {
	store Store       // decides
	given Store       // as given to New: store, or an ObservingStore over it
	fast  FunnelTaker // store's, when it has one
	obs   Observer    // told of the decisions that are not plain admissions
	memo  *funnelMemo // shared by the Limiters that WithObserver makes
}

// funnelMemo holds the parameters of the first plain funnel limit (a
// funnel without a ban) that a Limiter's AllowN decided under, so that
// AllowN, which checks its limit on every call, computes them again only
// for the others. It is written once, and only read after: a Limiter that
// applies many limits, from many goroutines, shares no line that is
// written.
type funnelMemo struct {
	p atomic.Pointer[memoParams]
}

// memoParams are a plain funnel limit's Count, Period and Burst, and the
// parameters they give.
type memoParams struct {
	count, burst int64
	period       time.Duration
	p            gcra.Params
}

// New returns a Limiter over store. Over an ObservingStore it decides on
// the store that it wraps and tells its Observer (see ObservingStore).
func New(store Store) *Limiter {
	if os, ok := store.(ObservingStore); ok {
		inner, o := os.Observed()
		l := New(inner).WithObserver(o)
		l.given = store
		return l
	}
	fast, _ := store.(FunnelTaker)
	return &Limiter{store: store, given: store, fast: fast, memo: new(funnelMemo)}
}

// Allow is shorthand for AllowN(ctx, key, limit, 1).
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 1)
}

// AllowN asks for n units of key under limit, now. If the result is allowed
// the units are charged; if not, nothing changes (but a limit with a Ban
// starts the ban) and RetryAfter says when the same request would pass. n = 0
// is the same as Peek; a negative n is an error (give units back with
// Refund). Concurrency limits are taken with Acquire.
//
// The error wraps ErrInvalidLimit or ErrInvalidQuantity for bad arguments,
// or is the store's error.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int64) (r Result, err error) {
	if l.fast != nil && n >= 0 && limit.plainFunnel() {
		var p gcra.Params
		if m := l.memo.p.Load(); m != nil && m.count == limit.Count && m.period == limit.Period && m.burst == limit.Burst {
			p = m.p
		} else if p, err = limit.gcraParams(); err != nil {
			return Result{}, err
		} else if m == nil {
			l.memo.p.CompareAndSwap(nil, &memoParams{count: limit.Count, burst: limit.Burst, period: limit.Period, p: p})
		}
		if l.obs != nil {
			return l.takeFunnelObserved(ctx, key, &limit, &p, n)
		}
		// The commonest decision: nothing to keep across the store's call
		// but p.Limit.
		g, err := l.fast.TakeFunnel(ctx, key, p, n)
		if err != nil {
			return Result{}, err
		}
		fillResult(&r, p.Limit, g)
		return r, nil
	}
	if err := checkN(n); err != nil {
		if err := limit.Validate(); err != nil {
			return Result{}, err // the limit's error first, as ever
		}
		return Result{}, err
	}
	return l.take(ctx, key, &limit, nil, n)
}

// takeFunnelObserved decides a funnel through the store's FunnelTaker and
// tells the observer of a refusal (a funnel has no Delay, and a
// FunnelTaker answers no fallback).
func (l *Limiter) takeFunnelObserved(ctx context.Context, key string, limit *Limit, p *gcra.Params, n int64) (Result, error) {
	g, err := l.fast.TakeFunnel(ctx, key, *p, n)
	if err != nil {
		return Result{}, err
	}
	r := ResultOf(*p, g)
	if !r.Allowed && l.obs != nil {
		l.observeFunnel(ctx, key, limit, p, &r)
	}
	return r, nil
}

// AllowChecked is AllowN under a limit already checked by Limit.Check, for
// a caller that checks a limit once and applies it many times (or checks it
// as it parses it, as the RESP server does), so that it is not checked
// again on every decision. c is read, not kept.
//
// Unlike AllowN it takes a negative n for the funnel (GCRA) without a ban:
// |n| units are given back and the answer is a decision, never past a full
// bucket (redis-cell's refund idiom, CL.THROTTLE key b c p -1). Other limits
// take no negative n.
func (l *Limiter) AllowChecked(ctx context.Context, key string, c *Checked, n int64) (r Result, err error) {
	if l.fast != nil && l.obs == nil && c.plainFunnel() {
		// The commonest decision, on its own: nothing to keep across the
		// store's call but c. The result is written field by field where
		// it is returned from (see fillResult).
		g, err := l.fast.TakeFunnel(ctx, key, c.GCRA, n)
		if err != nil {
			return Result{}, err
		}
		fillResult(&r, c.GCRA.Limit, g)
		return r, nil
	}
	if l.fast != nil && c.plainFunnel() {
		return l.takeFunnelObserved(ctx, key, &c.Limit, &c.GCRA, n)
	}
	return l.take(ctx, key, nil, c, n)
}

// Do applies ops through the store as Store.Do says, for a caller that
// keeps its own op and result buffers (a server that decides for many
// requests, one after the other, on one connection): what AllowChecked
// does, with nothing to allocate or pool. The ops' limits must come from
// Limit.Check. A cost that overflows is ErrInvalidQuantity.
func (l *Limiter) Do(ctx context.Context, ops []Op, res []Result) error {
	var err error
	if len(ops) == 1 && len(res) > 0 && l.fast != nil && ops[0].Kind == OpTake && ops[0].Limit.plainFunnel() {
		op := &ops[0]
		var g gcra.Result
		res[0] = Result{}
		if g, err = l.fast.TakeFunnel(ctx, op.Key, op.Limit.GCRA, op.N); err == nil {
			fillResult(&res[0], op.Limit.GCRA.Limit, g)
			if l.obs != nil && !g.Allowed {
				l.observeOps(ctx, ops[:1], res)
			}
		}
	} else {
		err = l.store.Do(ctx, ops, res)
		if l.obs != nil && err == nil {
			l.observeOps(ctx, ops, res)
		}
	}
	if err != nil && errors.Is(err, gcra.ErrOverflow) && !errors.Is(err, ErrInvalidQuantity) {
		err = fmt.Errorf("%w: %w", ErrInvalidQuantity, err)
	} else if err != nil && len(ops) == 1 && ops[0].Kind != OpTake {
		err = quantityError(ops[0].N, err)
	}
	return err
}

// take applies one OpTake of n units of key, under limit (checked here) or
// c (checked already), with the op written once, in place, in the pooled
// buffer that goes to the store: the path of every decision.
func (l *Limiter) take(ctx context.Context, key string, limit *Limit, c *Checked, n int64) (Result, error) {
	b := oneOps.Get().(*oneOp)
	op := &b.ops[0]
	var err error
	if c != nil {
		op.Limit = *c
	} else {
		err = limit.checkInto(&op.Limit)
	}
	switch {
	case err != nil:
	case op.Limit.Algorithm == Concurrency:
		err = fmt.Errorf("%w %v: take leases with Acquire", ErrInvalidLimit, op.Limit.Limit)
	case n < 0 && (op.Limit.Algorithm != GCRA || op.Limit.Ban != 0):
		err = fmt.Errorf("%w %d: %w (only a funnel without a ban takes units back this way; see Refund)", ErrInvalidQuantity, n, algo.ErrNegative)
	default:
		op.Kind, op.Key, op.N, op.Lease, op.Latency = OpTake, key, n, "", 0
		err = l.store.Do(ctx, b.ops[:], b.res[:])
		if l.obs != nil && err == nil {
			l.observeOps(ctx, b.ops[:], b.res[:])
		}
	}
	r := b.res[0]
	op.Key, op.Limit.Location = "", nil // keep no key or time zone alive
	oneOps.Put(b)
	if err != nil {
		if errors.Is(err, gcra.ErrOverflow) {
			err = fmt.Errorf("%w %d: %w", ErrInvalidQuantity, n, err)
		}
		return Result{}, err
	}
	return r, nil
}

// Peek reports the state of key under limit without charging anything:
// Remaining and ResetAfter as they are now. It is Allowed unless the key is
// over its limit (in debt after a Charge, or charged under a larger limit);
// RetryAfter is then the time until it is at its limit again. PeekN asks
// whether n units would be admitted.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowN(ctx, key, limit, 0)
}

// Reset forgets key, giving it a full bucket (an empty state of any
// algorithm), and reports whether it held state.
func (l *Limiter) Reset(ctx context.Context, key string) (bool, error) {
	return l.store.Reset(ctx, key)
}

// TTL returns the time until key's state is empty (a funnel's bucket is
// full again), and false when the key holds no state.
func (l *Limiter) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	return l.store.TTL(ctx, key)
}

// Store returns the store the limiter applies its limits through, as
// given to New.
func (l *Limiter) Store() Store { return l.given }
