package funnel

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// Algorithm is the rule by which a Limit admits requests.
type Algorithm uint8

// The limiter family. Every algorithm is exact, keeps a small state per key
// (the sliding log: one record per admitted unit) and forgets a key when its
// state is empty again.
const (
	// GCRA is the funnel, the zero Algorithm: Count units per Period leak out
	// of a bucket that holds Burst+1, computed as GCRA (redis-cell's
	// CL.THROTTLE). Choose it by default: smooth, O(1), bursts bounded.
	GCRA Algorithm = iota
	// LeakyBucket is nginx's limit_req: the funnel's admission, but an
	// admitted request within the burst is told to wait (Result.Delay) so
	// that requests proceed at the rate; DelayUnits units pass at once. Choose it
	// to smooth traffic rather than refuse it.
	LeakyBucket
	// FixedWindow admits Count units per window: Period-long windows aligned
	// to the Unix epoch, or calendar days, weeks or months (Calendar,
	// Location). Choose it for quotas ("1,000 per day") and envoy-style
	// limits; it lets 2·Count through across a window boundary.
	FixedWindow
	// SlidingWindow is the O(1) sliding window counter: the current window's
	// units plus the previous window's weighted by overlap. Choose it for a
	// smoother window at fixed cost; it is exact per aligned window and
	// admits at most 2·Count−1 in any Period in the worst case.
	SlidingWindow
	// SlidingLog keeps a timestamp per admitted unit: never more than Count
	// in any Period, exactly. Choose it for low counts that must be exact;
	// memory grows with Count (at most algo.MaxLogCount).
	SlidingLog
	// Concurrency holds at most Count leases at once (OpenResty limit.conn);
	// a lease not released expires after Period. With a Burst, up to Burst
	// more are granted, each told to wait (Result.Delay, see UnitDelay).
	// Use Limiter.Acquire (or AcquireWait) and Limiter.Release (or
	// ReleaseAfter).
	Concurrency
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"gcra", "leaky_bucket", "fixed_window", "sliding_window", "sliding_log", "concurrency"}

// String returns the algorithm's name as ParseAlgorithm accepts it.
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the algorithm named s: gcra (or funnel),
// leaky_bucket, fixed_window, sliding_window, sliding_log or concurrency.
func ParseAlgorithm(s string) (Algorithm, error) {
	if s == "funnel" {
		return GCRA, nil
	}
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalidLimit, s)
}

// Calendar selects calendar-aligned fixed windows.
type Calendar uint8

// Calendar units.
const (
	// NoCalendar: windows of Period aligned to the Unix epoch.
	NoCalendar Calendar = iota
	// Daily: from midnight to midnight in Location.
	Daily
	// Weekly: from Monday midnight to Monday midnight in Location.
	Weekly
	// Monthly: from the first of the month to the first of the next.
	Monthly
)

// String returns "day", "week" or "month" (or "" for NoCalendar).
func (c Calendar) String() string {
	switch c {
	case NoCalendar:
		return ""
	case Daily:
		return "day"
	case Weekly:
		return "week"
	case Monthly:
		return "month"
	}
	return fmt.Sprintf("Calendar(%d)", uint8(c))
}

// unit returns the calendar unit as algo.CalendarSpan takes it.
func (c Calendar) unit() byte {
	if c > Monthly {
		return 'd' // Validate refuses it; Span must not panic on it
	}
	return "-dwm"[c]
}

// NoDelay is the DelayUnits of a leaky bucket that never delays (nginx's
// nodelay).
const NoDelay = algo.NoDelay

// Span returns the fixed window [start, end) that holds now (ns since the
// Unix epoch), in ms, for a FixedWindow limit.
func (l Limit) Span(now int64) algo.Span {
	if l.Calendar != NoCalendar {
		return algo.CalendarSpan(now, l.Calendar.unit(), l.Location)
	}
	return algo.EpochSpan(now, int64(l.Period/time.Millisecond))
}

// Checked is a validated limit with its precomputed parameters, as stores
// take it. Build it with Limit.Check.
type Checked struct {
	Limit
	// GCRA holds the parameters of a funnel or leaky bucket.
	GCRA gcra.Params
	// Window holds the parameters of the window algorithms and concurrency.
	Window algo.WindowParams
}

// Conc returns the parameters of a Concurrency limit, with d as its unit
// delay: the key's own, or the limit's default when the key has none (0).
func (c *Checked) Conc(d int64) algo.ConcParams {
	return algo.ConcParams{WindowParams: c.Window, Burst: c.Burst, Delay: algo.UnitDelay(d, int64(c.UnitDelay))}
}

// Check validates l and returns it with its parameters.
func (l Limit) Check() (Checked, error) { return l.check() }

func (l Limit) check() (Checked, error) {
	var c Checked
	if err := l.checkInto(&c); err != nil {
		return Checked{}, err
	}
	return c, nil
}

// plainFunnel reports whether l is a funnel (GCRA) with no option, the
// commonest limit: its parameters are gcraParams alone.
func (l *Limit) plainFunnel() bool {
	return l.Algorithm == GCRA && l.Ban == 0 && l.DelayUnits == 0 && l.Calendar == NoCalendar && l.Location == nil && l.UnitDelay == 0
}

// plainFunnel reports whether c is a funnel (GCRA) without a ban, which a
// store decides on its commonest path.
func (c *Checked) plainFunnel() bool { return c.Algorithm == GCRA && c.Ban == 0 }

// checkInto is check writing into *c (left undefined on error), so that a
// decision checks its limit in place, in the op it sends to the store.
func (l *Limit) checkInto(c *Checked) error {
	// Field by field: a composite literal would be built aside and copied.
	c.Limit, c.Window = *l, algo.WindowParams{}
	if l.plainFunnel() {
		// The plain funnel, the commonest limit, checked on every decision.
		var err error
		c.GCRA, err = l.gcraParams()
		return err
	}
	c.GCRA = gcra.Params{}
	bad := func(err error) error {
		return fmt.Errorf("%w %v: %w", ErrInvalidLimit, *l, err)
	}
	if l.Ban < 0 {
		return bad(algo.ErrNegative)
	}
	if l.Algorithm == Concurrency && l.Ban != 0 {
		return bad(errors.New("concurrency limits do not ban"))
	}
	if l.Algorithm != LeakyBucket && l.DelayUnits != 0 {
		return bad(fieldErr("delay", "only leaky_bucket takes a delay"))
	}
	if l.Algorithm != Concurrency && l.UnitDelay != 0 {
		return bad(fieldErr("unit_delay", "only concurrency takes a unit delay"))
	}
	if l.Algorithm != FixedWindow && (l.Calendar != NoCalendar || l.Location != nil) {
		return bad(fieldErr("calendar", "only fixed_window takes a calendar"))
	}
	var err error
	switch l.Algorithm {
	case GCRA, LeakyBucket:
		if l.DelayUnits < 0 {
			return bad(algo.ErrNegative)
		}
		c.GCRA, err = l.gcraParams()
		return err
	case FixedWindow:
		if l.Calendar > Monthly {
			return bad(fmt.Errorf("unknown calendar %d", l.Calendar))
		}
		period := l.Period
		if l.Calendar != NoCalendar {
			period = 24 * time.Hour // checked for the count only
		}
		c.Window, err = algo.NewWindowParams(l.Count, period)
		if l.Calendar != NoCalendar {
			c.Window.Period = 0
		}
	case SlidingWindow:
		if c.Window, err = algo.NewWindowParams(l.Count, l.Period); err == nil {
			err = c.Window.CheckSliding()
		}
	case SlidingLog:
		if c.Window, err = algo.NewWindowParams(l.Count, l.Period); err == nil {
			err = c.Window.CheckLog()
		}
	case Concurrency:
		if err := checkUnitDelay(l.UnitDelay); err != nil {
			return bad(err)
		}
		var p algo.ConcParams
		p, err = algo.NewConcParams(l.Count, l.Period, l.Burst, l.UnitDelay)
		c.Window = p.WindowParams
	default:
		return bad(fmt.Errorf("unknown algorithm %d", l.Algorithm))
	}
	if err != nil {
		return bad(err)
	}
	return nil
}

// OpKind is what an Op does.
type OpKind uint8

// Operations of Store.Do.
const (
	// OpTake asks for N units (0 peeks) of Key under Limit; for
	// Concurrency, N is 1 and Lease names the lease to take.
	OpTake OpKind = iota
	// OpRefund gives back N units of Key under Limit, never below an empty
	// state; for Concurrency it releases Lease (the Limit then carries only
	// its Algorithm) and the result is Allowed when the lease was held. A
	// release that reports a Latency moves the key's unit delay to the mean
	// of the two (algo.Leave); when the lease is not held, it is an error
	// that wraps ErrLeaseNotHeld, and nothing changes.
	OpRefund
	// OpCharge records N units of Key already spent under Limit, whatever
	// the key holds (a cost known only afterwards): a funnel's or leaky
	// bucket's TAT moves past the tolerance if need be, a window's count
	// past its limit (see gcra.Charge and algo.FixedCharge, SlidingCharge
	// and LogCharge); the key is then refused until the debt has drained.
	// It is always applied; its result is a peek at the state it leaves:
	// Allowed reports that the key is within its limit, and when it is
	// not, RetryAfter is the time until the debt has drained. A charge on
	// a key that is banned is applied and answered Banned; one that leaves
	// the key over a limit with a Ban starts the ban. Not for Concurrency.
	OpCharge
	// OpPeek asks whether N units of Key would be admitted under Limit
	// now, and if not after how long (RetryAfter; Never when N is above
	// the limit), charging nothing: a take that is never charged and never
	// starts a ban. Remaining and ResetAfter are the key's as it is; an
	// admitted peek of a leaky bucket says the Delay the take would get.
	// N = 0 is the same as an OpTake of 0. Not for Concurrency.
	OpPeek
)

// Op is one operation on one key.
type Op struct {
	Kind  OpKind
	Key   string
	Limit Checked
	N     int64
	// Lease is the lease id of a Concurrency operation.
	Lease string
	// Latency is, for the release of a Concurrency lease, how long the
	// lease's request took, when positive (at most algo.MaxUnitDelay); 0
	// reports none.
	Latency time.Duration
}

// Ban is one banned key.
type Ban struct {
	Key string
	// Until is when the ban ends.
	Until time.Time
}

// Request is one (key, limit, quantity) of Limiter.AllowAll.
type Request struct {
	Key   string
	Limit Limit
	// N is the quantity asked for; 0 peeks.
	N int64
}

// MultiResult is the answer to Limiter.AllowAll.
type MultiResult struct {
	// Allowed reports whether every limit admitted the request (and all were
	// charged). When false nothing was charged.
	Allowed bool
	// Results holds each request's own result, in the order given.
	Results []Result
	// Refused is the index of the first refusing request, or -1.
	Refused int
	// RetryAfter is zero when allowed, else the longest RetryAfter of the
	// refusing requests: the earliest time at which all of them could pass.
	RetryAfter time.Duration
}

// oneOp is the buffers of a call of one op: slices passed through the
// Store interface escape, so they are pooled rather than allocated per
// call.
type oneOp struct {
	ops [1]Op
	res [1]Result
}

var oneOps = sync.Pool{New: func() any { return new(oneOp) }}

// manyOp is the op buffer of AllowAll for a few requests.
type manyOp struct {
	ops [8]Op
}

var manyOps = sync.Pool{New: func() any { return new(manyOp) }}

// do runs one op through the store.
func (l *Limiter) do(ctx context.Context, op Op) (Result, error) {
	return l.do1(ctx, op.Kind, op.Key, &op.Limit, op.N, op.Lease, op.Latency)
}

// do1 is do with the op's fields, its limit by pointer: the op is written
// once, into the pooled buffer, on the path of every decision.
func (l *Limiter) do1(ctx context.Context, kind OpKind, key string, c *Checked, n int64, lease string, latency time.Duration) (Result, error) {
	b := oneOps.Get().(*oneOp)
	op := &b.ops[0]
	op.Kind, op.Key, op.Limit, op.N, op.Lease, op.Latency = kind, key, *c, n, lease, latency
	err := l.store.Do(ctx, b.ops[:], b.res[:])
	if l.obs != nil && err == nil {
		l.observeOps(ctx, b.ops[:], b.res[:])
	}
	r := b.res[0]
	// Keep no key, lease or time zone alive.
	op.Key, op.Lease, op.Limit.Location = "", "", nil
	oneOps.Put(b)
	if err != nil {
		return Result{}, err
	}
	return r, nil
}

// checkN validates a quantity.
func checkN(n int64) error {
	if n < 0 {
		return fmt.Errorf("%w %d: %w", ErrInvalidQuantity, n, algo.ErrNegative)
	}
	return nil
}

// AllowAll asks for every request at once, all-or-nothing: either every
// limit admits its request and all are charged, or none is charged and the
// result says which refused and when to retry. Keys must not repeat; on
// Redis Cluster they must share a {hash tag}. Concurrency limits are not
// taken here (use Acquire).
func (l *Limiter) AllowAll(ctx context.Context, reqs []Request) (MultiResult, error) {
	return l.AllowAllInto(ctx, reqs, make([]Result, len(reqs)))
}

// AllowAllInto is AllowAll writing each request's result into results,
// which must hold at least len(reqs), and which MultiResult.Results then
// is (results[:len(reqs)]): a caller that keeps a buffer of results (one
// per connection, or pooled) asks for several limits at once with no
// allocation for up to 8 requests. results is written only by this call.
func (l *Limiter) AllowAllInto(ctx context.Context, reqs []Request, results []Result) (MultiResult, error) {
	if len(results) < len(reqs) {
		return MultiResult{}, fmt.Errorf("funnel: %d results for %d requests", len(results), len(reqs))
	}
	var ops []Op
	if len(reqs) <= len(manyOp{}.ops) {
		// Few requests, the common case: the ops go to the store in a
		// pooled buffer, so that only the results are allocated.
		b := manyOps.Get().(*manyOp)
		ops = b.ops[:len(reqs)]
		defer func() {
			clear(ops) // keep no key or time zone alive
			manyOps.Put(b)
		}()
	} else {
		ops = make([]Op, len(reqs))
	}
	var seen map[string]struct{} // for many keys; a few are compared in turn
	if len(reqs) > 16 {
		seen = make(map[string]struct{}, len(reqs))
	}
	for i, r := range reqs {
		c, err := r.Limit.check()
		if err != nil {
			return MultiResult{}, err
		}
		if c.Algorithm == Concurrency {
			return MultiResult{}, fmt.Errorf("%w %v: take leases with Acquire", ErrInvalidLimit, r.Limit)
		}
		if err := checkN(r.N); err != nil {
			return MultiResult{}, err
		}
		dup := false
		if seen != nil {
			_, dup = seen[r.Key]
			seen[r.Key] = struct{}{}
		} else {
			for _, o := range reqs[:i] {
				dup = dup || o.Key == r.Key
			}
		}
		if dup {
			return MultiResult{}, fmt.Errorf("%w: %q", ErrDuplicateKey, r.Key)
		}
		ops[i] = Op{Kind: OpTake, Key: r.Key, Limit: c, N: r.N}
	}
	m := MultiResult{Results: results[:len(reqs)], Refused: -1}
	if err := l.store.Do(ctx, ops, m.Results); err != nil {
		if errors.Is(err, gcra.ErrOverflow) {
			err = fmt.Errorf("%w: %w", ErrInvalidQuantity, err)
		}
		return MultiResult{}, err
	}
	if l.obs != nil {
		l.observeOps(ctx, ops, m.Results)
	}
	m.Allowed = true
	for i, r := range m.Results {
		if !r.Allowed {
			if m.Allowed {
				m.Refused = i
			}
			m.Allowed = false
			m.RetryAfter = max(m.RetryAfter, r.RetryAfter)
		}
	}
	return m, nil
}

// Wait asks for n units of key under limit and, when admitted, waits the
// Delay the result asks for (a LeakyBucket's queue) before returning. A
// refused request returns at once with Allowed false. It is AllowN, then
// Await.
//
// If ctx ends before the Delay has passed, the caller will not proceed, so
// Wait gives the n units back, as Refund does, and returns the zero Result
// and ctx's error. The refund is asked on a context that keeps ctx's values
// but not its end, bounded by a few seconds. If the refund fails too, the
// units stay charged and the error wraps both ctx's error and the
// refund's.
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit, n int64) (Result, error) {
	r, err := l.AllowN(ctx, key, limit, n)
	if err != nil {
		return r, err
	}
	return l.Await(ctx, key, limit, n, r)
}

// Await waits the Delay of r, the answer of AllowN(ctx, key, limit, n),
// when r admitted the request, and returns r; a refusal, or an admission
// without a Delay, returns at once. If ctx ends first, the caller will not
// proceed: Await gives the n units back and returns the zero Result and
// ctx's error, as Wait says. For a caller that decides with AllowN and
// waits on its own terms (the HTTP middleware), so that every wait gives
// back what it does not use.
func (l *Limiter) Await(ctx context.Context, key string, limit Limit, n int64, r Result) (Result, error) {
	if !r.Allowed || r.Delay <= 0 {
		return r, nil
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return r, nil
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitRefundTimeout)
	defer cancel()
	if err := l.Refund(rctx, key, limit, n); err != nil {
		return Result{}, fmt.Errorf("funnel: Wait ended (%w) and the %d units stay charged, their refund failed: %w", ctx.Err(), n, err)
	}
	return Result{}, ctx.Err()
}

// waitRefundTimeout bounds the refund of a Wait whose context ended.
const waitRefundTimeout = 2 * time.Second

// Lease is a held unit of a Concurrency limit. Release it when the work is
// done; if it is never released it expires after the limit's Period.
type Lease struct {
	Key string
	ID  string
}

// Acquire takes a lease of key under a Concurrency limit. When granted
// within the limit's Burst, Result.Delay is how long the request must wait
// before it proceeds (AcquireWait sleeps it); it holds its lease from now.
// When refused, Result.RetryAfter is the time until the first held lease
// expires (a release may come sooner) and the Lease is the zero value.
func (l *Limiter) Acquire(ctx context.Context, key string, limit Limit) (Lease, Result, error) {
	id, err := newLeaseID()
	if err != nil {
		return Lease{}, Result{}, err
	}
	return l.AcquireID(ctx, key, limit, id)
}

// leaseIDs is a batch of random lease ids: 64 ids of 32 hex digits (128
// random bits each) in one string, handed out as substrings, so that an
// Acquire neither allocates its id nor reads the system's random source.
type leaseIDs struct {
	s    string
	next int
}

const (
	leaseIDLen   = 32
	leaseIDBatch = 64
)

var leaseIDPool = sync.Pool{New: func() any { return new(leaseIDs) }}

// newLeaseID returns a random lease id of 32 hex digits.
func newLeaseID() (string, error) {
	b := leaseIDPool.Get().(*leaseIDs)
	if b.next == len(b.s) {
		var raw [leaseIDBatch * leaseIDLen / 2]byte
		if _, err := rand.Read(raw[:]); err != nil {
			leaseIDPool.Put(b)
			return "", err
		}
		const digits = "0123456789abcdef"
		var sb strings.Builder // one allocation: the batch's string
		sb.Grow(2 * len(raw))
		for _, c := range raw {
			sb.WriteByte(digits[c>>4])
			sb.WriteByte(digits[c&15])
		}
		b.s, b.next = sb.String(), 0
	}
	id := b.s[b.next : b.next+leaseIDLen]
	b.next += leaseIDLen
	leaseIDPool.Put(b)
	return id, nil
}

// AcquireID is Acquire with a lease id chosen by the caller, such as a
// request id; acquiring an id that is held renews it, without a delay.
func (l *Limiter) AcquireID(ctx context.Context, key string, limit Limit, id string) (Lease, Result, error) {
	c, err := limit.check()
	if err != nil {
		return Lease{}, Result{}, err
	}
	if c.Algorithm != Concurrency {
		return Lease{}, Result{}, fmt.Errorf("%w %v: leases are for concurrency limits", ErrInvalidLimit, limit)
	}
	r, err := l.do(ctx, Op{Kind: OpTake, Key: key, Limit: c, N: 1, Lease: id})
	if err != nil || !r.Allowed {
		return Lease{}, r, err
	}
	return Lease{Key: key, ID: id}, r, nil
}

// AcquireWait is Acquire that, when the lease is granted with a Delay,
// waits it out before returning (a request queued within the limit's
// Burst). A refused request returns at once with Allowed false.
//
// If ctx ends before the Delay has passed, the caller will not proceed, so
// AcquireWait releases the lease (without a latency) and returns the zero
// Lease and Result and ctx's error. The release is asked on a context that
// keeps ctx's values but not its end, bounded by a few seconds. If the
// release fails too, the lease stays held until it expires and the error
// wraps both ctx's error and the release's.
func (l *Limiter) AcquireWait(ctx context.Context, key string, limit Limit) (Lease, Result, error) {
	lease, r, err := l.Acquire(ctx, key, limit)
	if err != nil || !r.Allowed || r.Delay <= 0 {
		return lease, r, err
	}
	t := time.NewTimer(r.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		return lease, r, nil
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), waitRefundTimeout)
	defer cancel()
	if _, err := l.Release(rctx, lease); err != nil {
		return Lease{}, Result{}, fmt.Errorf("funnel: AcquireWait ended (%w) and the lease stays held until it expires, its release failed: %w", ctx.Err(), err)
	}
	return Lease{}, Result{}, ctx.Err()
}

// Release frees the lease and reports whether it was still held (false when
// it had expired or was released before).
func (l *Limiter) Release(ctx context.Context, lease Lease) (bool, error) {
	if lease.ID == "" {
		return false, nil
	}
	r, err := l.do(ctx, Op{Kind: OpRefund, Key: lease.Key, Limit: releaseLimit, Lease: lease.ID})
	return r.Allowed, err
}

// ReleaseAfter is Release that reports how long the lease's request took
// (0 ≤ latency ≤ algo.MaxUnitDelay; 0 counts as 1ns): the key's unit delay
// moves to the mean of the latency and itself (see Limit.UnitDelay), so
// that the delays of queued requests follow how long a lease is really
// held. A latency out of range is an error that wraps ErrInvalidQuantity;
// a lease that is not held (expired, released, or never taken), one that
// wraps ErrLeaseNotHeld. Either error changes nothing.
func (l *Limiter) ReleaseAfter(ctx context.Context, lease Lease, latency time.Duration) (bool, error) {
	if err := checkLatency(latency); err != nil {
		return false, err
	}
	if lease.ID == "" {
		return false, fmt.Errorf("%w: the zero Lease", ErrLeaseNotHeld)
	}
	r, err := l.do(ctx, Op{Kind: OpRefund, Key: lease.Key, Limit: releaseLimit, Lease: lease.ID, Latency: max(latency, 1)})
	return r.Allowed, err
}

// checkLatency validates the latency of a release.
func checkLatency(latency time.Duration) error {
	switch {
	case latency < 0:
		return fmt.Errorf("%w: latency %v: %w", ErrInvalidQuantity, latency, algo.ErrNegative)
	case latency > algo.MaxUnitDelay:
		return fmt.Errorf("%w: latency %v is above the largest, %v", ErrInvalidQuantity, latency, algo.MaxUnitDelay)
	}
	return nil
}

// releaseLimit is the limit of a release: only its algorithm matters.
var releaseLimit = Checked{Limit: Limit{Algorithm: Concurrency}}

// Refund gives back n units of key under limit for a request that did not
// happen, never below an empty state. For Concurrency, release the lease.
func (l *Limiter) Refund(ctx context.Context, key string, limit Limit, n int64) error {
	c, err := limit.check()
	if err != nil {
		return err
	}
	if c.Algorithm == Concurrency {
		return fmt.Errorf("%w %v: release the lease instead", ErrInvalidLimit, limit)
	}
	if err := checkN(n); err != nil {
		return err
	}
	_, err = l.do(ctx, Op{Kind: OpRefund, Key: key, Limit: c, N: n})
	return err
}

// Bans lists the keys banned now.
func (l *Limiter) Bans(ctx context.Context) ([]Ban, error) { return l.store.Bans(ctx) }

// Unban lifts key's ban and reports whether it was banned.
func (l *Limiter) Unban(ctx context.Context, key string) (bool, error) {
	return l.store.Unban(ctx, key)
}
