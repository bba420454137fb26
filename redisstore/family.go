package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
)

// familySource is the script of the limiter family beyond the plain funnel
// (the funnel itself too when it comes with a ban or with other limits).
var familySource = include("family.lua")

var _ funnel.Store = (*Store)(nil)

// maxOps is the most ops one Do call takes.
const maxOps = 64

// opCode returns the script's letters for an op.
func opCode(op funnel.Op) (kind, alg string) {
	kind = "t"
	switch op.Kind {
	case funnel.OpRefund:
		kind = "r"
	case funnel.OpCharge:
		kind = "c"
	case funnel.OpPeek:
		kind = "p"
	}
	return kind, string("glfsoc"[op.Limit.Algorithm])
}

// Do applies ops at Redis's current time (see funnel.Store) in one script
// call. One funnel op without a ban, the commonest call, goes through
// gcra.lua, batched with the decisions waiting at the same moment; the
// commonest others through short scripts of their own (window.lua, batched
// too, log.lua, conc.lua, takes.lua for several takes or a calendar
// window's; see each); the rest, and what a short
// script finds it does not hold, through family.lua. On a Redis Cluster
// every key of one call must be in one hash slot (share a {hash tag}), or
// the error wraps funnel.ErrCrossSlot. When Redis cannot be reached in
// time, takes and peeks answer the fail-open or fail-closed fallback
// (Result.Fallback), and refunds and charges, which are not decisions, fail
// with an error wrapping funnel.ErrUnavailable.
func (s *Store) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	if len(ops) == 0 {
		return nil
	}
	if len(ops) > maxOps {
		return fmt.Errorf("%w: %d ops in one call, at most %d", funnel.ErrInvalidQuantity, len(ops), maxOps)
	}
	if len(res) < len(ops) {
		return fmt.Errorf("redisstore: %d results for %d ops", len(res), len(ops))
	}
	if op := &ops[0]; len(ops) == 1 && op.Kind == funnel.OpTake && op.Limit.Ban == 0 &&
		(op.Limit.Algorithm == funnel.GCRA || op.Limit.Algorithm == funnel.LeakyBucket && op.N > 0 && op.Limit.DelayUnits >= 0) {
		// One take on a funnel, or of some units on a delaying bucket,
		// whose admission and state are the funnel's (algo.LeakyDecide):
		// gcra.lua, batched with the others in flight. (A delaying
		// bucket's take of 0 keeps an ended TAT, as memstore's does, so
		// that it limits again after a clock stepped back: family.lua.)
		if op.Limit.GCRA.Interval <= 0 {
			return fmt.Errorf("%w %v: parameters not computed by Limit.Check", funnel.ErrInvalidLimit, op.Limit.Limit)
		}
		delay := int64(-1)
		if op.Limit.Algorithm == funnel.LeakyBucket {
			delay = op.Limit.DelayUnits
		}
		r, err := s.throttle(ctx, op.Key, op.Limit.GCRA, op.N, delay)
		res[0] = r
		return err
	}
	// (Checked before the short scripts too: a limit not computed by
	// Limit.Check is refused on every path alike.)
	if err := funnel.CheckOps(ops, res); err != nil {
		return err
	}
	if op := &ops[0]; len(ops) == 1 && op.Kind == funnel.OpTake && op.Limit.Ban == 0 && op.N >= 0 &&
		(op.Limit.Algorithm == funnel.FixedWindow && op.Limit.Calendar == funnel.NoCalendar || op.Limit.Algorithm == funnel.SlidingWindow) {
		if done, err := s.window(ctx, op, &res[0]); done {
			return err
		}
	}
	if op := &ops[0]; len(ops) == 1 && op.Kind == funnel.OpTake && op.Limit.Ban == 0 && op.N >= 0 &&
		op.Limit.Algorithm == funnel.SlidingLog && op.Limit.Window.Count <= s.logPack {
		if done, err := s.logTake(ctx, op, &res[0]); done {
			return err
		}
	}
	if op := &ops[0]; len(ops) == 1 && op.Limit.Algorithm == funnel.Concurrency && (op.Kind == funnel.OpTake || op.Kind == funnel.OpRefund) {
		if done, err := s.conc(ctx, ops[:1], res[:1]); done {
			return err
		}
	}
	if err := s.oneSlot(ops); err != nil {
		return err
	}
	// Several takes at once, or one on a calendar's fixed window (which
	// window.lua, whose windows follow from Redis's clock alone, does not
	// take): takes.lua.
	if op := &ops[0]; len(ops) > 1 || op.Limit.Algorithm == funnel.FixedWindow && op.Limit.Calendar != funnel.NoCalendar {
		if done, err := s.takes(ctx, ops, res); done {
			return err
		}
	}
	keys := make([]string, 0, 2*len(ops))
	args, err := s.familyArgs()
	if err != nil {
		return err
	}
	args = append(args, strconv.Itoa(len(ops)))
	for _, op := range ops {
		key := s.prefix + op.Key
		// A concurrency limit has no ban: its op names its own key in the
		// ban's place (which a Ring key with braces but no hash tag could
		// not have beside it).
		bk := key
		if op.Limit.Algorithm != funnel.Concurrency {
			var err error
			if bk, err = s.banKey(op.Key); err != nil {
				return err
			}
		}
		keys = append(keys, key, bk)
		a, err := s.opArgs(op)
		if err != nil {
			return err
		}
		args = append(args, a...)
	}
	v, err := s.evalTimed(ctx, familyScript, keys, args)
	if err != nil {
		return s.familyFailed(ctx, err, ops, res)
	}
	return decodeFamily(v, ops, res)
}

// familyFailed answers ops, whose script call (family.lua, conc.lua or
// takes.lua) failed with err: the error itself when the script refused the
// call or the caller gave up; else, Redis being unreachable, the fallback
// for takes and peeks, and an error wrapping funnel.ErrUnavailable for a
// refund or a charge (alone in its call).
func (s *Store) familyFailed(ctx context.Context, err error, ops []funnel.Op, res []funnel.Result) error {
	if errors.Is(err, funnel.ErrWrongType) || errors.Is(err, errInternal) || errors.Is(err, errClock) {
		return err
	}
	if err := callerDone(ctx); err != nil {
		return err
	}
	if k := ops[0].Kind; k == funnel.OpRefund || k == funnel.OpCharge {
		// Not decisions: what was given back or spent is not
		// recorded, and the caller is told so.
		s.reload()
		return fmt.Errorf("redisstore: %w: %w", funnel.ErrUnavailable, err)
	}
	s.fallbacks.Add(int64(len(ops)))
	s.failed(err)
	for i, op := range ops {
		res[i] = funnel.Result{Fallback: true, Allowed: s.failOpen, Limit: op.Limit.Capacity()}
	}
	return nil
}

// oneSlot returns an error wrapping funnel.ErrCrossSlot when the keys of
// ops are not all in one hash slot of a Redis Cluster, or, for a Ring, do
// not all share one hash tag.
func (s *Store) oneSlot(ops []funnel.Op) error {
	slot := -1
	for _, op := range ops {
		key := s.prefix + op.Key
		if s.runner.grouping() == groupSlot {
			if sl := int(keySlot(key)); slot < 0 {
				slot = sl
			} else if sl != slot {
				return fmt.Errorf("%w (%q)", funnel.ErrCrossSlot, op.Key)
			}
		} else if s.runner.grouping() == groupNone && len(ops) > 1 {
			// A Ring shards by the hash tag, or by the whole key.
			tag := hashTag(key)
			if tag == "" || tag != hashTag(s.prefix+ops[0].Key) {
				return fmt.Errorf("%w (%q; a Ring shards keys by their hash tag)", funnel.ErrCrossSlot, op.Key)
			}
		}
	}
	return nil
}

// maxExact is 2^53: a cost or a tolerance below it is exact in Lua's
// doubles, and goes to takes.lua whole rather than on two limbs.
const maxExact = 1 << 53

// takes decides ops, takes under several limits at once, all or nothing,
// in takes.lua, and reports whether it did: it does when every op is a
// take without a ban on a funnel, a delaying bucket, a fixed window or a
// sliding window counter (a funnel's cost and tolerance below 2^53 ns) and
// every key holds a state of its op's kind or nothing. Else family.lua
// decides them, and nothing was changed.
func (s *Store) takes(ctx context.Context, ops []funnel.Op, res []funnel.Result) (bool, error) {
	for i := range ops {
		op := &ops[i]
		c := &op.Limit
		if op.Kind != funnel.OpTake || c.Ban != 0 || op.N < 0 {
			return false, nil
		}
		switch c.Algorithm {
		case funnel.GCRA, funnel.LeakyBucket:
			if c.GCRA.Tolerance >= maxExact || op.N > 0 && c.GCRA.Interval > (maxExact-1)/op.N {
				return false, nil
			}
		case funnel.FixedWindow, funnel.SlidingWindow:
		default:
			return false, nil
		}
	}
	args, err := s.args("", 0)
	if err != nil {
		return true, err
	}
	args = args[1:]
	keys := make([]string, len(ops))
	var now int64
	// the calendar windows sent, by op
	var spans []algo.Span
	for i := range ops {
		op := &ops[i]
		c := &op.Limit
		keys[i] = s.prefix + op.Key
		switch c.Algorithm {
		case funnel.GCRA, funnel.LeakyBucket:
			_, alg := opCode(*op)
			args = append(args, alg, limb(op.N), limb(c.GCRA.Interval*op.N), limb(c.GCRA.Tolerance))
		case funnel.SlidingWindow:
			args = append(args, "s", limb(min(op.N, c.Window.Count+1)), limb(c.Window.Count), limb(c.Window.Period))
		default:
			q := limb(min(op.N, c.Window.Count+1))
			if c.Calendar == funnel.NoCalendar {
				args = append(args, "f", q, limb(c.Window.Count), limb(c.Window.Period))
				break
			}
			// The window that holds this machine's now; Redis's clock
			// places it (see family.lua's three windows).
			if now == 0 {
				now = time.Now().UnixNano()
				if s.now != nil {
					now = s.now()
				}
			}
			cur := c.Limit.Span(now)
			if spans == nil {
				spans = make([]algo.Span, len(ops))
			}
			spans[i] = cur
			args = append(args, "d", q, limb(c.Window.Count), limb(cur.Start), limb(cur.End))
		}
	}
	v, err := s.evalTimed(ctx, takesScript, keys, args)
	if err != nil {
		return true, s.familyFailed(ctx, err, ops, res)
	}
	if len(v) == 3 && v[2] == -1 {
		return false, nil
	}
	if len(v) < 2 || v[0] < 0 || v[0] > math.MaxInt64/int64(time.Second) || v[1] < 0 || v[1] >= 1e9 {
		return true, fmt.Errorf("%w: takes script reply %v", errInternal, v)
	}
	now = v[0]*1e9 + v[1]
	// family.lua's reply: six numbers per op (status, a ban's two, none
	// here, and three of the state found).
	var buf [2 + 6*8]int64
	f := buf[:0]
	if len(ops) > 8 {
		f = make([]int64, 0, 2+6*len(ops))
	}
	f = append(f, v[0], v[1])
	w := v[2:]
	next := func() (int64, bool) {
		if len(w) == 0 {
			return 0, false
		}
		x := w[0]
		w = w[1:]
		return x, true
	}
	for i := range ops {
		c := &ops[i].Limit
		x, ok := next()
		if !ok {
			return true, fmt.Errorf("%w: takes script reply %v for %d ops", errInternal, v, len(ops))
		}
		st := x & 3
		switch c.Algorithm {
		case funnel.GCRA, funnel.LeakyBucket:
			dh, dl := (x>>2)/1e9, (x>>2)%1e9
			if x < 0 {
				st = -1 - x
				h, ok1 := next()
				l, ok2 := next()
				if !ok1 || !ok2 {
					return true, fmt.Errorf("%w: takes script reply %v for %d ops", errInternal, v, len(ops))
				}
				dh, dl = h, l
			}
			f = append(f, st, 0, 0, dh, dl, 0)
		case funnel.SlidingWindow:
			prev, ok := next()
			if !ok {
				return true, fmt.Errorf("%w: takes script reply %v for %d ops", errInternal, v, len(ops))
			}
			span := algo.EpochSpan(now, c.Window.Period)
			f = append(f, st, 0, 0, span.Start, prev, x>>2)
		default:
			var span algo.Span
			if c.Calendar == funnel.NoCalendar {
				span = algo.EpochSpan(now, c.Window.Period)
			} else {
				span = spans[i]
			}
			f = append(f, st, 0, 0, span.Start, span.End, x>>2)
		}
	}
	if len(w) != 0 {
		return true, fmt.Errorf("%w: takes script reply %v for %d ops", errInternal, v, len(ops))
	}
	return true, decodeFamily(f, ops, res)
}

// opArgs returns the script's arguments for one op.
func (s *Store) opArgs(op funnel.Op) ([]string, error) {
	kind, alg := opCode(op)
	c := op.Limit
	q := op.N
	ban := c.Ban
	if op.Kind == funnel.OpRefund || c.Algorithm == funnel.Concurrency {
		ban = 0
	}
	a := []string{kind, alg, "", limb(int64(ban / time.Second)), limb(int64(ban % time.Second))}
	switch c.Algorithm {
	case funnel.GCRA, funnel.LeakyBucket:
		// A cost beyond int64 refunds everything, and a charge of it does
		// not fit (the script says so once it has read the key's kind).
		cost := int64(math.MaxInt64)
		if q == 0 || c.GCRA.Interval <= math.MaxInt64/q {
			cost = c.GCRA.Interval * q
		} else if op.Kind != funnel.OpRefund && op.Kind != funnel.OpCharge {
			return nil, gcra.ErrOverflow
		}
		a[2] = limb(min(q, 1<<52)) // the cost carries it; Lua only tests q > 0
		a = append(a, limb(cost/1e9), limb(cost%1e9), limb(c.GCRA.Tolerance/1e9), limb(c.GCRA.Tolerance%1e9))
	case funnel.FixedWindow, funnel.SlidingWindow, funnel.SlidingLog, funnel.Concurrency:
		// Quantities above the count are refused alike: keep them small.
		// A charge of a fixed or sliding window is a count, which goes to
		// Redis whole (bounded by algo.MaxCount, exact in a double), and
		// so does a refund, which gives back from a count that a charge
		// may have taken past the limit; a sliding log keeps count+1
		// entries of a charge at most.
		a[2] = limb(min(q, c.Window.Count+1))
		if c.Algorithm == funnel.FixedWindow || c.Algorithm == funnel.SlidingWindow {
			switch op.Kind {
			case funnel.OpCharge:
				if q > algo.MaxCount {
					return nil, algo.ErrOverflow
				}
				a[2] = limb(q)
			case funnel.OpRefund:
				a[2] = limb(min(q, algo.MaxCount))
			}
		}
		a = append(a, limb(c.Window.Count), limb(c.Window.Period))
		if c.Algorithm == funnel.FixedWindow && c.Calendar != funnel.NoCalendar {
			// The calendar window is computed here, in Go, which knows time
			// zones; Redis picks the one that holds its own now among the
			// windows around this machine's now.
			now := time.Now().UnixNano()
			if s.now != nil {
				now = s.now()
			}
			cur := c.Limit.Span(now)
			prev := c.Limit.Span(cur.Start*int64(time.Millisecond) - 1)
			next := c.Limit.Span(cur.End * int64(time.Millisecond))
			a[len(a)-1] = "0"
			a = append(a, limb(prev.Start), limb(prev.End), limb(cur.Start), limb(cur.End), limb(next.Start), limb(next.End))
		}
		if c.Algorithm == funnel.Concurrency {
			if strings.HasPrefix(op.Lease, "\x00") || (op.Lease == "" && q > 0) {
				return nil, fmt.Errorf("%w: a lease id must not be empty or start with a NUL byte", funnel.ErrInvalidLimit)
			}
			if op.Latency < 0 || op.Latency > algo.MaxUnitDelay {
				return nil, fmt.Errorf("%w: latency %v is not within 0 to %v", funnel.ErrInvalidQuantity, op.Latency, algo.MaxUnitDelay)
			}
			// -1 spares the script reading the key's unit delay when
			// nothing depends on it: a release without a latency, or a take
			// under a limit without a burst or a default unit delay (which
			// delays nothing and leaves the key's unit delay as it is).
			latency := int64(-1)
			switch {
			case op.Kind == funnel.OpRefund && op.Latency > 0:
				latency = int64(op.Latency)
			case op.Kind == funnel.OpTake && (c.Burst > 0 || c.UnitDelay > 0):
				latency = 0
			}
			// The script admits up to count + burst leases.
			a[len(a)-2] = limb(c.Window.Count + c.Burst)
			// Empty strings for 0 and for -1: the plain path's arguments
			// cost nothing to build or to pass.
			def, lat := "", ""
			if c.UnitDelay > 0 {
				def = limb(int64(c.UnitDelay))
			}
			if latency >= 0 {
				lat = limb(latency)
			}
			a = append(a, op.Lease, def, lat)
		}
	default:
		return nil, fmt.Errorf("%w: unknown algorithm %v", funnel.ErrInvalidLimit, c.Algorithm)
	}
	return a, nil
}

// errClock is the error of a calendar window that Redis's clock does not
// place near this machine's.
var errClock = errors.New("redisstore: the calendar window is not near Redis's time; are the clocks apart?")

// window decides op, one take of a fixed window of a fixed period or of a
// sliding window counter without a ban, through window.lua (batched with
// the others in flight): family.lua's decision for it, in a call that
// costs Redis less. It reports false, with nothing changed, when the key
// holds anything else (another algorithm's state, empty or not), which Do
// then sends to family.lua.
func (s *Store) window(ctx context.Context, op *funnel.Op, res *funnel.Result) (bool, error) {
	c := &op.Limit
	alg := "f"
	if c.Algorithm == funnel.SlidingWindow {
		alg = "s"
	}
	now, code, prev, err := s.decideWindow(ctx, op.Key, alg, min(op.N, c.Window.Count+1), c.Window.Count, c.Window.Period)
	if err != nil {
		return true, s.shortFallback(ctx, err, op, res)
	}
	if code == -1 {
		return false, nil
	}
	// The state the script found, in family.lua's terms (see familyResult).
	span := algo.EpochSpan(now, c.Window.Period)
	f := [6]int64{code & 3, 0, 0, span.Start, span.End, code >> 2}
	if alg == "s" {
		f[4], f[5] = prev, code>>2
	}
	return true, shortResult(now, op, f[:], res, "window", [2]int64{code, prev})
}

// shortFallback answers op's fallback when a short script (window.lua,
// log.lua) failed because Redis could not be reached, and returns any
// other error.
func (s *Store) shortFallback(ctx context.Context, err error, op *funnel.Op, res *funnel.Result) error {
	if err := s.fallsBack(ctx, err); err != nil {
		return err
	}
	*res = funnel.Result{Fallback: true, Allowed: s.failOpen, Limit: op.Limit.Capacity()}
	return nil
}

// shortResult sets res to op's result from f, the state a short script
// (window.lua, log.lua) found at now in family.lua's terms (see
// familyResult), which must agree with the script's status f[0]; reply is
// what the script answered, for the error when it does not.
func shortResult(now int64, op *funnel.Op, f []int64, res *funnel.Result, script string, reply any) error {
	r, err := familyResult(now, *op, f, op.N)
	if err != nil {
		return err
	}
	if (f[0] == 1) != r.Allowed {
		return fmt.Errorf("%w: %s script status %d where Go decides %+v (%v, %+v)", errInternal, script, f[0], r, reply, op)
	}
	*res = r
	return nil
}

// defaultLogPack is the largest count of a sliding log kept packed (see
// Options.SortedSetLogs): a packed decision reads and writes the whole
// log, which at 256 entries costs about what a sorted set's commands do.
const defaultLogPack = 256

// defaultConcRead is the most leases a concurrency key may hold for
// conc.lua to read it whole (its marker and its leases), with one ZRANGE,
// rather than with a command for each number it needs.
const defaultConcRead = 16

// conc decides ops, one acquire or release of a concurrency limit, in
// conc.lua, and reports whether it did: a key that holds anything but live
// leases goes to family.lua.
func (s *Store) conc(ctx context.Context, ops []funnel.Op, res []funnel.Result) (bool, error) {
	op := &ops[0]
	a, err := s.opArgs(*op)
	if err != nil {
		return true, err
	}
	args, err := s.familyArgs()
	if err != nil {
		return true, err
	}
	// opArgs's kind, alg, q, ban (two limbs), count, period, id, default
	// unit delay and latency: conc.lua takes q ('r' for a release), the
	// count, the period and the id, and, only when the latency is not
	// empty, one more: for an acquire (whose latency is then 0) the marker
	// of a key given the default unit delay u (its score, -1-u, written
	// here rather than by the script), for a release its latency. An empty
	// latency (-1) means that the key's unit delay is not read; the default
	// unit delay is then not used either (it is empty, or the op is a
	// release, which never uses it).
	q := a[2]
	if op.Kind == funnel.OpRefund {
		q = "r"
	}
	args = append(args, q, a[5], a[6], a[7])
	switch {
	case a[9] == "":
	case op.Kind == funnel.OpRefund:
		args = append(args, a[9])
	default:
		mark := ""
		if u := op.Limit.UnitDelay; u > 0 {
			mark = strconv.FormatInt(-1-int64(u), 10)
		}
		args = append(args, mark)
	}
	v, err := s.evalTimed(ctx, concScript, []string{s.prefix + op.Key}, args)
	if err != nil {
		return true, s.familyFailed(ctx, err, ops, res)
	}
	if len(v) == 2 && v[1] == -1 {
		return false, nil
	}
	if len(v) < 4 || len(v) > 6 || v[1] < 0 || v[0] < 0 || v[0] > math.MaxInt64/1000 {
		return true, fmt.Errorf("%w: concurrency script reply %v", errInternal, v)
	}
	// now: Redis's TIME, in µs, or the clock this store injected, whose
	// nanoseconds the reply leaves out.
	now := v[0] * 1000
	if s.now != nil {
		sec, _ := strconv.ParseInt(args[0], 10, 64)
		nsec, _ := strconv.ParseInt(args[1], 10, 64)
		now = sec*1e9 + nsec
	}
	// family.lua's reply (see familyResult's concurrency case).
	code, unit, wait := v[1], int64(0), int64(-1)
	if len(v) > 4 {
		unit = v[4]
	}
	if len(v) > 5 {
		wait = v[5]
	}
	f := [8]int64{now / 1e9, now % 1e9, code & 1, v[2], v[3], code >> 2, code>>1&1 + 2*unit, wait}
	return true, decodeFamily(f[:], ops, res)
}

// logTake decides op, one take of a sliding log of a count up to
// s.logPack without a ban, in log.lua, and reports whether it did: a key
// that holds anything but a packed log goes to family.lua (which turns a
// sorted-set log into a packed one).
func (s *Store) logTake(ctx context.Context, op *funnel.Op, res *funnel.Result) (bool, error) {
	c := &op.Limit
	args, err := s.args("", 0)
	if err != nil {
		return true, err
	}
	args = append(args[1:], limb(min(op.N, c.Window.Count+1)), limb(c.Window.Count), limb(c.Window.Period))
	v, err := s.evalTimed(ctx, logScript, []string{s.prefix + op.Key}, args)
	if err != nil {
		return true, s.shortFallback(ctx, err, op, res)
	}
	if len(v) == 3 && v[2] == -1 {
		return false, nil
	}
	if len(v) != 5 || v[0] < 0 || v[0] > math.MaxInt64/int64(time.Second)-1 || v[1] < 0 || v[1] >= 1e9 || v[2] < 0 || v[2]&3 > 1 {
		return true, fmt.Errorf("%w: log script reply %v", errInternal, v)
	}
	now := v[0]*1e9 + v[1]
	// The state the script found, in family.lua's terms (see familyResult).
	f := [6]int64{v[2] & 3, 0, 0, v[2] >> 2, v[3], v[4]}
	return true, shortResult(now, op, f[:], res, "log", v)
}

// decodeFamily computes each op's result from the script's reply: now, then
// six integers per op.
func decodeFamily(v []int64, ops []funnel.Op, res []funnel.Result) error {
	if len(v) != 2+6*len(ops) {
		return fmt.Errorf("%w: family script reply %v for %d ops", errInternal, v, len(ops))
	}
	if v[0] < 0 || v[0] > math.MaxInt64/int64(time.Second) || v[1] < 0 || v[1] >= 1e9 {
		return fmt.Errorf("%w: family script time %v", errInternal, v[:2])
	}
	now := v[0]*1e9 + v[1]
	switch ops[0].Kind {
	case funnel.OpCharge:
		return decodeCharge(now, ops[0], v[2:8], &res[0])
	case funnel.OpPeek:
		return decodePeek(now, ops[0], v[2:8], &res[0])
	}
	if ops[0].Kind == funnel.OpRefund {
		// Alone in its call; the script answered the state it leaves.
		f := v[2:8]
		r, err := familyResult(now, ops[0], f, 0)
		if err != nil {
			return err
		}
		if op := &ops[0]; op.Limit.Algorithm == funnel.Concurrency {
			r.Allowed, r.Delay = f[4]&1 == 1, 0
			if !r.Allowed && op.Latency > 0 {
				return fmt.Errorf("%w: lease %q of key %q", funnel.ErrLeaseNotHeld, op.Lease, op.Key)
			}
		} else {
			r.Allowed = true
		}
		res[0] = r
		return nil
	}
	refused := false
	for i, op := range ops {
		f := v[2+6*i : 8+6*i]
		if f[0] == 2 {
			return gcra.ErrOverflow
		}
		r, err := familyResult(now, op, f, op.N)
		if err != nil {
			return err
		}
		if (f[0] == 1) != r.Allowed && f[0] != 3 {
			return fmt.Errorf("%w: family script status %d where Go decides %+v (%+v, %+v)", errInternal, f[0], r, f, op)
		}
		if f[0] == 3 {
			// Banned: the limit's own answer, as a peek when it would admit.
			if r.Allowed {
				if r, err = familyResult(now, op, f, 0); err != nil {
					return err
				}
			}
			_, left, err := decodeLimbs(0, f[1], f[2])
			if err != nil {
				return err
			}
			r = banned(r, time.Duration(left))
		}
		if !r.Allowed {
			refused = true
		}
		res[i] = r
	}
	if !refused {
		return nil
	}
	// Nothing was charged: the ops admitted alone report their state as it
	// stays, and the refusals of limits with a ban started it.
	for i, op := range ops {
		f := v[2+6*i : 8+6*i]
		switch {
		case res[i].Allowed:
			r, err := familyResult(now, op, f, 0)
			if err != nil {
				return err
			}
			res[i] = r
		case op.N > 0 && op.Limit.Ban > 0 && op.Limit.Algorithm != funnel.Concurrency && !res[i].Banned:
			res[i] = banned(res[i], op.Limit.Ban)
		}
	}
	return nil
}

// decodeCharge computes the result of an OpCharge (alone in its call) from
// the state that the script found (f), as memstore computes it: the state
// the charge leaves, peeked.
func decodeCharge(now int64, op funnel.Op, f []int64, res *funnel.Result) error {
	c := &op.Limit
	q := op.N
	if f[0] == 2 {
		if c.Algorithm == funnel.GCRA || c.Algorithm == funnel.LeakyBucket {
			return gcra.ErrOverflow
		}
		return algo.ErrOverflow
	}
	r := funnel.Result{Limit: c.Capacity()}
	var ar algo.Result
	var err error
	switch c.Algorithm {
	case funnel.GCRA, funnel.LeakyBucket:
		_, d, err := decodeLimbs(0, f[3], f[4])
		if err != nil {
			return err
		}
		_, g, err := gcra.Charge(0, d, c.GCRA, q)
		if err != nil {
			return err
		}
		r = funnel.ResultOf(c.GCRA, g)
	case funnel.FixedWindow:
		_, ar, err = algo.FixedCharge(now, algo.Fixed{Start: f[3], N: f[5]}, c.Window.Count, algo.Span{Start: f[3], End: f[4]}, q)
		r = funnel.ResultOfAlgo(r.Limit, ar)
	case funnel.SlidingWindow:
		_, ar, err = algo.SlidingCharge(now, algo.Sliding{Start: f[3], Prev: f[4], Cur: f[5]}, c.Window, q)
		r = funnel.ResultOfAlgo(r.Limit, ar)
	case funnel.SlidingLog:
		// n live entries, the entry a charge within the count waits for,
		// the newest; the charge's entries are at ⌈now⌉ or the newest.
		n, wait, newest := f[3], f[4], f[5]
		p := c.Window
		if q == 0 {
			if r, err = familyResult(now, op, f, 0); err != nil {
				return err
			}
			break
		}
		at := max(algo.CeilMillis(now), newest)
		if n > p.Count-q {
			if q > p.Count {
				wait = at
			}
			r.RetryAfter = algo.Until(now, wait+p.Period)
		} else {
			r.Allowed = true
			r.Remaining = p.Count - n - q
		}
		r.ResetAfter = algo.Until(now, at+p.Period)
	default:
		return fmt.Errorf("%w %v: not charged", funnel.ErrInvalidLimit, c.Limit)
	}
	if err != nil {
		return err
	}
	if (f[0] == 1) != r.Allowed && f[0] != 3 {
		return fmt.Errorf("%w: family script status %d of a charge where Go decides %+v (%+v, %+v)", errInternal, f[0], r, f, op)
	}
	switch {
	case f[0] == 3:
		_, left, err := decodeLimbs(0, f[1], f[2])
		if err != nil {
			return err
		}
		r = banned(r, time.Duration(left))
	case !r.Allowed && q > 0 && c.Ban > 0:
		r = banned(r, c.Ban)
	}
	*res = r
	return nil
}

// decodePeek computes the result of an OpPeek (alone in its call) from the
// state that the script found (f): the take's admission and RetryAfter,
// and when admitted, the state as it stays with the take's Delay.
func decodePeek(now int64, op funnel.Op, f []int64, res *funnel.Result) error {
	if f[0] == 2 {
		return gcra.ErrOverflow
	}
	r, err := familyResult(now, op, f, op.N)
	if err != nil {
		return err
	}
	if (f[0] == 1) != r.Allowed && f[0] != 3 {
		return fmt.Errorf("%w: family script status %d of a peek where Go decides %+v (%+v, %+v)", errInternal, f[0], r, f, op)
	}
	if r.Allowed {
		d := r.Delay
		if r, err = familyResult(now, op, f, 0); err != nil {
			return err
		}
		r.Delay = d
	}
	if f[0] == 3 {
		if r.Allowed {
			r.Delay = 0
		}
		_, left, err := decodeLimbs(0, f[1], f[2])
		if err != nil {
			return err
		}
		r = banned(r, time.Duration(left))
	}
	*res = r
	return nil
}

// banned returns r as refused by a ban that ends after left.
func banned(r funnel.Result, left time.Duration) funnel.Result {
	r.Allowed = false
	r.Banned = true
	r.Remaining = 0
	r.Delay = 0
	if r.RetryAfter != funnel.Never {
		r.RetryAfter = max(r.RetryAfter, left)
	}
	return r
}

// familyResult computes, at now, the result of a take of q units under op's
// limit on the state the script found (f: status, two numbers, and three of
// the state).
func familyResult(now int64, op funnel.Op, f []int64, q int64) (funnel.Result, error) {
	c := op.Limit
	r := funnel.Result{Limit: c.Capacity()}
	switch c.Algorithm {
	case funnel.GCRA, funnel.LeakyBucket:
		_, d, err := decodeLimbs(0, f[3], f[4])
		if err != nil {
			return r, err
		}
		_, ar, err := algo.LeakyDecide(0, d, c.GCRA, c.DelayUnits, q)
		if err != nil {
			return r, err
		}
		if c.Algorithm == funnel.GCRA {
			ar.Delay = 0
		}
		return funnel.ResultOfAlgo(r.Limit, ar), nil
	case funnel.FixedWindow:
		span := algo.Span{Start: f[3], End: f[4]}
		_, ar, err := algo.FixedDecide(now, algo.Fixed{Start: f[3], N: f[5]}, c.Window.Count, span, q)
		return funnel.ResultOfAlgo(r.Limit, ar), err
	case funnel.SlidingWindow:
		_, ar, err := algo.SlidingDecide(now, algo.Sliding{Start: f[3], Prev: f[4], Cur: f[5]}, c.Window, q)
		return funnel.ResultOfAlgo(r.Limit, ar), err
	case funnel.SlidingLog:
		n, wait, newest := f[3], f[4], f[5]
		p := c.Window
		switch {
		case q > p.Count:
			r.RetryAfter = funnel.Never
		case n > p.Count-q:
			r.RetryAfter = algo.Until(now, wait+p.Period)
		default:
			r.Allowed = true
			if q > 0 {
				n += q
				newest = max(newest, algo.CeilMillis(now))
			}
		}
		if n < p.Count {
			r.Remaining = p.Count - n
		}
		if n > 0 {
			r.ResetAfter = algo.Until(now, newest+p.Period)
		}
		return r, nil
	case funnel.Concurrency:
		// last: the latest expiry of the leases held; f[2]: the same
		// without this lease, which a grant renews
		n, held, unit, wait, last := f[3], f[4]&1, f[4]>>1, f[5], f[1]
		p := c.Conc(unit)
		most := p.Count + p.Burst
		ms := algo.Millis(now)
		switch {
		case q == 0:
			r.Allowed = true
			if n < most {
				r.Delay = algo.ConcDelay(p, n+1)
			}
		case q > 1:
			r.RetryAfter = funnel.Never
		case held == 0 && n >= most:
			r.RetryAfter = algo.Until(now, wait)
		default:
			r.Allowed = true
			if held == 0 {
				n++
				r.Delay = algo.ConcDelay(p, n)
			}
			last = max(f[2], ms+p.Period)
		}
		if n < most {
			r.Remaining = most - n
		}
		if n > 0 {
			r.ResetAfter = algo.Until(now, last)
		}
		return r, nil
	}
	return r, fmt.Errorf("%w: unknown algorithm %v", funnel.ErrInvalidLimit, c.Algorithm)
}

// clearEmpty deletes key if it holds a state of the limiter family that is
// empty now, and reports whether the key is now free for a funnel's TAT (it
// is absent): the path of a funnel's decision that found the key holding
// something other than a TAT, rare enough to cost a second round trip.
func (s *Store) clearEmpty(ctx context.Context, key string) bool {
	left, err := s.keyop(ctx, key, "e")
	return err == nil && left == 0
}

// banTags holds, for each hash slot, a short string whose slot it is: a ban
// key carries the tag of its key's slot, so that a script may read both.
var banTags = sync.OnceValue(func() *[16384]string {
	var t [16384]string
	left := len(t)
	for i := 0; left > 0; i++ {
		tag := strconv.FormatInt(int64(i), 36)
		if s := keySlot(tag); t[s] == "" {
			t[s] = tag
			left--
		}
	}
	return &t
})

// banPrefix is the part of ban keys after the slot tag and the store prefix.
const banPrefix = "ban:"

// banKey returns the key of key's ban, in the hash slot (or the Ring shard)
// of prefix + key: "{tag}" + prefix + "ban:" + key, where the tag is a short
// string of the key's slot on Redis Cluster and a single node, and on a Ring
// the key's own hash tag, or the whole key when it has none.
func (s *Store) banKey(key string) (string, error) {
	full := s.prefix + key
	if s.runner.grouping() == groupNone {
		tag := hashTag(full)
		if tag == "" {
			if strings.ContainsAny(full, "{}") {
				return "", fmt.Errorf("%w: on a Ring, a key with braces but no hash tag cannot have keys of its own beside it (its ban, its reservations): give it a hash tag (%q)", funnel.ErrCrossSlot, key)
			}
			tag = full
		}
		return "{" + tag + "}" + s.prefix + banPrefix + key, nil
	}
	return "{" + banTags()[keySlot(full)] + "}" + s.prefix + banPrefix + key, nil
}

// hashTag returns key's hash tag (what lies between its first '{' and the
// next '}'), or "" when it has none.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return ""
}

// banKeyOf returns the key a ban key belongs to, or false.
func (s *Store) banKeyOf(bk string) (string, bool) {
	if !strings.HasPrefix(bk, "{") {
		return "", false
	}
	i := strings.IndexByte(bk, '}')
	if i < 0 || !strings.HasPrefix(bk[i+1:], s.prefix+banPrefix) {
		return "", false
	}
	return bk[i+1+len(s.prefix)+len(banPrefix):], true
}

// Unban lifts key's ban and reports whether it was banned.
func (s *Store) Unban(ctx context.Context, key string) (bool, error) {
	args, err := s.args("", 0)
	if err != nil {
		return false, err
	}
	bk, err := s.banKey(key)
	if err != nil {
		return false, err
	}
	v, err := s.evalTimed(ctx, unbanScript, []string{bk}, args[1:3])
	if err != nil {
		return false, s.unavailable(ctx, err)
	}
	return len(v) == 1 && v[0] > 0, nil
}

// Bans lists the banned keys: it scans every master for ban keys.
func (s *Store) Bans(ctx context.Context) ([]funnel.Ban, error) {
	pattern := "{*}" + escapeGlob(s.prefix+banPrefix) + "*"
	found, now, err := s.scanBans(ctx, pattern)
	if err != nil {
		return nil, s.unavailable(ctx, err)
	}
	if s.now != nil {
		now = s.now()
	}
	var out []funnel.Ban
	for bk, v := range found {
		key, ok := s.banKeyOf(bk)
		if !ok {
			continue
		}
		until, err := strconv.ParseInt(v, 10, 64)
		if err != nil || until <= now {
			continue
		}
		out = append(out, funnel.Ban{Key: key, Until: time.Unix(0, until)})
	}
	slices.SortFunc(out, func(a, b funnel.Ban) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// escapeGlob escapes the characters that Redis's glob patterns treat
// specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unbanSource deletes a ban key and answers 1 if the ban had not ended:
// ARGV are now's seconds (empty to read TIME) and nanoseconds. A ban's end is
// a decimal count of nanoseconds, compared on two limbs (see family.lua).
const unbanSource = `
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
redis.call('DEL', KEYS[1])
local nh, nl
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nh, nl = t[1] + 0, t[2] * 1000
else
  nh, nl = ARGV[1] + 0, ARGV[2] + 0
end
local d = string.match(v, '^(%d+)$')
if not d or #d > 19 then
  return 0
end
local h, l = 0, d + 0
if #d > 9 then
  h, l = string.sub(d, 1, #d - 9) + 0, string.sub(d, #d - 8) + 0
end
if h > nh or (h == nh and l > nl) then
  return 1
end
return 0
`

// keyopsSource resets any key of the store, or says when its state is
// empty (see keyop).
var keyopsSource = include("keyops.lua")

// windowSource decides one take of a fixed window of a fixed period or of
// a sliding window counter, without a ban (see Store.window).
var windowSource = include("window.lua")

// logSource decides one take of a packed sliding log, without a ban (see
// Store.logTake).
var logSource = include("log.lua")

// concSource decides one acquire or release of a concurrency limit (see
// Store.conc).
var concSource = include("conc.lua")

// takesSource decides takes under several limits at once (see
// Store.takes).
var takesSource = include("takes.lua")

var (
	familyScript = newTimedScript(familySource, 0)
	windowScript = newTimedScript(windowSource, 0).withModule(2)
	logScript    = newTimedScript(logSource, 0).withModule(4)
	concScript   = newTimedScript(concSource, 0).withModule(3)
	takesScript  = newTimedScript(takesSource, 0).withModule(1)
	keyopsScript = newTimedScript(keyopsSource, 1)
	unbanScript  = newScript(unbanSource)
)

// keyop resets ("x"), probes ("p") or deletes when empty ("e") any key of
// the store (a funnel's TAT or the state of another algorithm) and returns
// how long until its state is empty: the time to the TAT, exact; for the
// other algorithms, to the millisecond at which it is empty. It is 0 when
// the state is empty or the key absent. Its errors wrap ErrWrongType,
// errInternal, or come from the client (Redis is unavailable).
func (s *Store) keyop(ctx context.Context, key, op string) (time.Duration, error) {
	args, err := s.args(op, 0)
	if err != nil {
		return 0, err
	}
	keys := []string{s.prefix + key}
	if fk := fenceKey(s.prefix + key); op == "x" && fk != "" {
		keys = append(keys, fk) // a reset keeps a rate shares' fence (see keyops.lua)
	}
	v, err := s.evalTimed(ctx, keyopsScript, keys, args[:3])
	if err != nil {
		return 0, err
	}
	if len(v) < 3 || v[0] < 0 || v[1] < 0 || v[1] >= 1e9 || v[0] > math.MaxInt64/int64(time.Second) {
		return 0, fmt.Errorf("%w: keyops reply %v", errInternal, v)
	}
	now := v[0]*1e9 + v[1]
	switch {
	case v[2] == -2 && len(v) == 5:
		_, tat, err := decodeLimbs(0, v[3], v[4])
		if err != nil {
			return 0, err
		}
		if d, ok := gcraKeyTTL(now, tat); ok {
			return d, nil
		}
		return time.Duration(max(tat-now, 0)), nil
	case len(v) != 3:
		return 0, fmt.Errorf("%w: keyops reply %v", errInternal, v)
	case v[2] < 0:
		return 0, nil
	}
	return algo.Until(now, v[2]), nil
}

// banScan reads the bans of one node: a script that scans for pattern
// (Redis allows SCAN in scripts since 5.0) and answers the keys with their
// values, and the node's time.
const banScanSource = `
local cursor, out = '0', {}
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local v = redis.pcall('GET', k)
    if type(v) == 'string' then
      out[#out + 1] = k
      out[#out + 1] = v
    end
  end
until cursor == '0'
local t = redis.call('TIME')
out[#out + 1] = t[1]
out[#out + 1] = t[2]
return out
`

// scanBans returns every key matching pattern with its value, from every
// master, and Redis's time (ns).
func (s *Store) scanBans(ctx context.Context, pattern string) (map[string]string, int64, error) {
	found := map[string]string{}
	var now int64
	read := func(v []string) error {
		if len(v) < 2 || len(v)%2 != 0 {
			return fmt.Errorf("%w: ban scan reply %v", errInternal, v)
		}
		sec, err1 := strconv.ParseInt(v[len(v)-2], 10, 64)
		usec, err2 := strconv.ParseInt(v[len(v)-1], 10, 64)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%w: ban scan time %v", errInternal, v[len(v)-2:])
		}
		now = max(now, sec*1e9+usec*1e3)
		for i := 0; i+1 < len(v)-2; i += 2 {
			found[v[i]] = v[i+1]
		}
		return nil
	}
	switch r := s.runner.(type) {
	case goRedisRunner:
		scan := func(ctx context.Context, c redis.Scripter) error {
			v, err := c.Eval(ctx, banScanSource, nil, pattern).StringSlice()
			if err != nil {
				return err
			}
			return read(v)
		}
		var err error
		switch c := r.c.(type) {
		case *redis.ClusterClient:
			var mu sync.Mutex
			err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
				mu.Lock()
				defer mu.Unlock()
				return scan(ctx, n)
			})
		case *redis.Ring:
			var mu sync.Mutex
			err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
				mu.Lock()
				defer mu.Unlock()
				return scan(ctx, n)
			})
		default:
			err = scan(ctx, c)
		}
		return found, now, err
	case rueidisRunner:
		nodes := r.c.Nodes()
		if r.c.Mode() != rueidis.ClientModeCluster {
			nodes = map[string]rueidis.Client{"": r.c}
		}
		for _, n := range nodes {
			v, err := n.Do(ctx, n.B().Eval().Script(banScanSource).Numkeys(0).Arg(pattern).Build()).AsStrSlice()
			if err != nil {
				if rueidis.IsRedisNil(err) {
					continue
				}
				// a replica answers READONLY to nothing here: scripts that
				// only read run on replicas too
				return nil, 0, err
			}
			if err := read(v); err != nil {
				return nil, 0, err
			}
		}
		return found, now, nil
	}
	return nil, 0, fmt.Errorf("%w: unknown client", errInternal)
}
