package respserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/cell"
)

// The FUNNEL.* commands serve the whole limiter family. Every duration they
// take or return is in milliseconds. Replies have fixed shapes:
//
//	FUNNEL.ALLOW key algorithm count period_ms [BURST n] [QUANTITY n]
//	    [DELAY n | NODELAY] [CALENDAR day|week|month] [TZ zone] [BAN ms] [PEEK]
//	  -> [allowed, limit, remaining, retry_after_ms, reset_after_ms, delay_ms, banned]
//	FUNNEL.CHARGE key algorithm count period_ms [options] QUANTITY n
//	  -> FUNNEL.ALLOW's reply, allowed 0 when the key is now over its limit
//	FUNNEL.RESERVE key algorithm count period_ms [options] QUANTITY estimate [TTL ms]
//	  -> FUNNEL.ALLOW's reply, then the reservation id (nil when refused)
//	FUNNEL.SETTLE key reservation_id actual
//	  -> FUNNEL.ALLOW's reply (the key after the settle), then again
//	FUNNEL.ALLOWALL n LIMIT key algorithm count period_ms [options] ... (n times)
//	  -> [allowed, refused_index, retry_after_ms, [7 integers per limit]...]
//	FUNNEL.ACQUIRE key count ttl_ms [ID lease_id] [BURST n] [DELAY ms]
//	  -> [allowed, limit, remaining, retry_after_ms, reset_after_ms, lease_id|nil, delay_ms]
//	FUNNEL.RELEASE key lease_id [LATENCY ms] -> 1 if the lease was held, else 0
//	FUNNEL.REFUND key algorithm count period_ms [options] -> OK
//	FUNNEL.BANS -> [[key, until_unix_ms]...]
//	FUNNEL.UNBAN key -> 1 if the key was banned, else 0
//
// As in CL.THROTTLE, retry_after_ms is -1 when the request was allowed and
// when no wait would admit it (its quantity is above the limit); the other
// durations are rounded up to whole milliseconds, so that waiting that long
// is always enough. reset_after_ms is -1 only in the reply to a fallback
// (the store could not decide: see fallbackReset).
//
// FUNNEL.ALLOW … PEEK asks whether QUANTITY units would be admitted now
// (funnel.Limiter.PeekN), charging nothing: a quantity above what the limit
// ever admits answers allowed 0 and retry_after_ms -1 (never). FUNNEL.CHARGE
// records QUANTITY units already spent (funnel.Limiter.Charge), into debt
// when they do not fit: allowed is 0 while the key is over its limit, and
// retry_after_ms is the time until its debt has drained. A charge is never a
// fallback: a store that cannot record it answers the fail-closed error.
//
// FUNNEL.RESERVE takes QUANTITY units (the estimate, at least 1) as
// FUNNEL.ALLOW does and, when they are admitted, records a reservation that
// lives TTL ms (default funnel.DefaultReservationTTL, at most
// funnel.MaxReservationTTL): funnel.Limiter.Reserve. A refusal or a
// fallback records none, and its id is nil. FUNNEL.SETTLE settles it at the
// actual amount (funnel.Limiter.Settle): the difference is charged (into
// debt) or given back, and the reply is the key's state after it as
// FUNNEL.CHARGE answers, then again: 1 when the reservation was settled
// before (nothing changed), else 0. An unknown or expired id is an error
// reply; a settle, like a charge, is never a fallback.

// famLimit is the limit an argument list describes, with its quantity.
type famLimit struct {
	limit funnel.Limit
	n     int64
	peek  bool          // PEEK: ask, charging nothing
	ttl   time.Duration // TTL of FUNNEL.RESERVE; 0: the default
}

// limitUse says which command's options parseLimitArgs reads: the options
// are the same for every command, with these differences.
type limitUse uint8

const (
	// useAllow is FUNNEL.ALLOW's list, the only one that takes PEEK.
	useAllow limitUse = iota
	// useAllowAll is a LIMIT block of FUNNEL.ALLOWALL: it stops at the
	// next LIMIT.
	useAllowAll
	// useRefund is FUNNEL.REFUND's list: no PEEK.
	useRefund
	// useCharge is FUNNEL.CHARGE's list: no PEEK, and QUANTITY is
	// required (a charge of a default of 1 unit would hide a missing cost).
	useCharge
	// useReserve is FUNNEL.RESERVE's list: no PEEK, QUANTITY required and
	// at least 1 (the estimate), and the only one that takes TTL.
	useReserve
)

// errSyntax is the reply to an option that is not understood.
var errSyntax = errors.New("ERR syntax error")

// parseFamInt parses an integer argument, naming it in the error.
func parseFamInt(name string, b []byte) (int64, error) {
	n, ok := cell.ParseInt(b)
	if !ok {
		return 0, fmt.Errorf("ERR %s is not an integer or out of range", name)
	}
	if n < 0 {
		return 0, fmt.Errorf("ERR %s must not be negative", name)
	}
	return n, nil
}

// parseMillis parses a non-negative duration in milliseconds.
func parseMillis(name string, b []byte) (time.Duration, error) {
	n, err := parseFamInt(name, b)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/int64(time.Millisecond) {
		return 0, fmt.Errorf("ERR %s is out of range", name)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// parseLimitArgs parses "algorithm count period_ms [options]" from args, as
// the command use reads them, and returns the limit and the number of
// arguments used; under useAllowAll it stops at an argument LIMIT. The
// options fill a funnel.Spec, which builds the limit as the other edges
// build theirs.
func parseLimitArgs(args [][]byte, use limitUse) (famLimit, int, error) {
	if len(args) < 3 {
		return famLimit{}, 0, errSyntax
	}
	name := strings.ToLower(string(args[0]))
	if alg, err := funnel.ParseAlgorithm(name); err != nil || alg == funnel.Concurrency {
		return famLimit{}, 0, fmt.Errorf("ERR unknown algorithm '%s' (gcra, leaky_bucket, fixed_window, sliding_window, sliding_log)", trunc(cstr(args[0]), 64))
	}
	count, err := parseFamInt("count", args[1])
	if err != nil {
		return famLimit{}, 0, err
	}
	period, err := parseMillis("period", args[2])
	if err != nil {
		return famLimit{}, 0, err
	}
	spec := funnel.Spec{Algorithm: name, Count: count, Period: period}
	f := famLimit{n: 1}
	quantity := false
	i := 3
	for i < len(args) {
		opt := strings.ToUpper(string(args[i]))
		if use == useAllowAll && opt == "LIMIT" {
			break
		}
		if opt == "NODELAY" {
			spec.NoDelay = true
			i++
			continue
		}
		if opt == "TTL" && use != useReserve {
			return famLimit{}, 0, errTTL
		}
		if opt == "PEEK" {
			if use != useAllow {
				return famLimit{}, 0, errPeek
			}
			f.peek = true
			i++
			continue
		}
		if i+1 >= len(args) {
			return famLimit{}, 0, errSyntax
		}
		v := args[i+1]
		switch opt {
		case "BURST":
			var b int64
			b, err = parseFamInt("burst", v)
			spec.Burst = &b
		case "QUANTITY":
			f.n, err = parseFamInt("quantity", v)
			quantity = true
		case "DELAY":
			var d int64
			d, err = parseFamInt("delay", v)
			spec.Delay = &d
		case "BAN":
			spec.Ban, err = parseMillis("ban", v)
		case "CALENDAR":
			spec.Calendar = strings.ToLower(string(v))
		case "TZ":
			spec.TimeZone = string(v)
		case "TTL":
			f.ttl, err = parseReservationTTL(v)
		default:
			return famLimit{}, 0, errSyntax
		}
		if err != nil {
			return famLimit{}, 0, err
		}
		i += 2
	}
	if use == useCharge && !quantity {
		return famLimit{}, 0, errChargeQuantity
	}
	if use == useReserve && (!quantity || f.n < 1) {
		return famLimit{}, 0, errReserveQuantity
	}
	if f.limit, err = spec.Limit(); err != nil {
		return famLimit{}, 0, limitError(err)
	}
	return f, i, nil
}

var (
	// errPeek is the reply to PEEK anywhere but in FUNNEL.ALLOW.
	errPeek = errors.New("ERR PEEK is an option of FUNNEL.ALLOW only")
	// errChargeQuantity is the reply to a FUNNEL.CHARGE without QUANTITY.
	errChargeQuantity = errors.New("ERR FUNNEL.CHARGE needs QUANTITY n, the units spent")
	// errReserveQuantity is the reply to a FUNNEL.RESERVE without
	// QUANTITY, or with a QUANTITY under 1.
	errReserveQuantity = errors.New("ERR FUNNEL.RESERVE needs QUANTITY n, the estimate reserved: at least 1")
	// errTTL is the reply to TTL anywhere but in FUNNEL.RESERVE.
	errTTL = errors.New("ERR TTL is an option of FUNNEL.RESERVE only")
	// errReserveTTL is the reply to a TTL out of its range.
	errReserveTTL = fmt.Errorf("ERR ttl must be whole milliseconds from 1 to %d", funnel.MaxReservationTTL/time.Millisecond)
)

// parseReservationTTL parses FUNNEL.RESERVE's TTL: whole milliseconds from
// 1 to funnel.MaxReservationTTL.
func parseReservationTTL(b []byte) (time.Duration, error) {
	n, ok := cell.ParseInt(b)
	if !ok || n < 1 || n > int64(funnel.MaxReservationTTL/time.Millisecond) {
		return 0, errReserveTTL
	}
	return time.Duration(n) * time.Millisecond, nil
}

// limitError turns a Validate error into a reply.
func limitError(err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "funnel: ")
	return errors.New("ERR " + msg)
}

// millisUp rounds d up to whole milliseconds.
func millisUp(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// retryMillis is the wire's retry_after_ms: -1 when allowed or never.
func retryMillis(allowed bool, retry time.Duration) int64 {
	if allowed || retry == funnel.Never {
		return -1
	}
	return millisUp(retry)
}

// writeFamResult writes the 7-integer reply of one decision.
func (c *conn) writeFamResult(r funnel.Result) {
	c.wr.WriteArray(7)
	c.writeFamInts(r)
}

// writeFamInts writes the 7 integers of one decision, without the array's
// header: FUNNEL.RESERVE and FUNNEL.SETTLE write an eighth element after
// them.
func (c *conn) writeFamInts(r funnel.Result) {
	retry := retryMillis(r.Allowed, r.RetryAfter)
	c.wr.WriteInt(b2i(r.Allowed))
	c.wr.WriteInt(r.Limit)
	c.wr.WriteInt(r.Remaining)
	c.wr.WriteInt(retry)
	c.wr.WriteInt(resetMillis(r))
	c.wr.WriteInt(millisUp(r.Delay))
	c.wr.WriteInt(b2i(r.Banned))
}

// resetMillis is the reset_after_ms of a FUNNEL.* reply: -1 for a fallback
// (the store did not decide: see fallbackReset), else the time until the
// limit is whole, rounded up to milliseconds.
func resetMillis(r funnel.Result) int64 {
	if r.Fallback {
		return fallbackReset
	}
	return millisUp(r.ResetAfter)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// count counts a decision in the connection's statistics.
func (c *conn) count(allowed bool) {
	if allowed {
		c.batch.allowed++
	} else {
		c.batch.limited++
	}
}

// decided counts the decision r and reports whether it is a fail-closed
// fallback that was answered with the error reply (see fallback), in which
// case the caller writes nothing more.
func (c *conn) decided(r *funnel.Result) bool {
	c.count(r.Allowed)
	return c.fallback(r)
}

// fallback is the one handling of a fallback r (a result with Fallback
// set; any other r is left as it is): it counts it, fail-open or
// fail-closed, and reports whether it answered it with the error reply
// storeDownText (Config.FailClosed's FailClosedError), in which case the
// caller writes nothing more. A fail-open r is changed into the reply that
// every command gives it (see fallbackReset): the whole limit remaining, no
// wait. Under FailClosedRefuse, a fail-closed r is changed into the refusal
// to write: a retry after of funnel.FallbackRetry, nothing remaining. The
// reply's reset after is fallbackReset either way.
func (c *conn) fallback(r *funnel.Result) bool {
	if !r.Fallback {
		return false
	}
	if r.Allowed {
		c.s.failOpen.Add(1)
		r.Remaining, r.RetryAfter, r.ResetAfter, r.Delay = r.Limit, 0, 0, 0
		return false
	}
	c.s.failClosed.Add(1)
	if c.s.cfg.FailClosed == FailClosedError {
		c.wr.WriteError(storeDownText)
		return true
	}
	r.RetryAfter, r.Remaining, r.ResetAfter = funnel.FallbackRetry, 0, 0
	return false
}

func cmdFunnelAllow(c *conn, args [][]byte) {
	f, _, err := parseLimitArgs(args[2:], useAllow)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	if f.peek {
		c.funnelPeek(args[1], f)
		return
	}
	r, err := c.s.lim.AllowN(context.Background(), storeKey(args[1]), f.limit, f.n)
	if err != nil {
		if !c.fellBack(err) {
			return
		}
		r = c.s.cfg.Fail.Fallback(f.limit)
	}
	if c.decided(&r) {
		return
	}
	c.writeFamResult(r)
}

// funnelPeek answers FUNNEL.ALLOW … PEEK: a probe of f.n units of key that
// charges nothing and is not counted as a decision. A store that cannot
// answer gets Config.Fail's fallback, as FUNNEL.ALLOW does.
func (c *conn) funnelPeek(key []byte, f famLimit) {
	r, err := c.s.lim.PeekN(context.Background(), storeKey(key), f.limit, f.n)
	if err != nil {
		if !c.fellBack(err) {
			return
		}
		r = c.s.cfg.Fail.Fallback(f.limit)
	}
	if c.fallback(&r) {
		return
	}
	c.writeFamResult(r)
}

func cmdFunnelCharge(c *conn, args [][]byte) {
	f, _, err := parseLimitArgs(args[2:], useCharge)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	r, err := c.s.lim.Charge(context.Background(), storeKey(args[1]), f.limit, f.n)
	if err != nil {
		// A charge is not a decision: a store that cannot record it
		// answers the fail-closed error, never a fallback that would
		// hide the lost cost.
		c.replyError(err)
		return
	}
	c.batch.ledger.charges++
	if !r.Allowed {
		c.batch.ledger.chargesInDebt++
	}
	c.writeFamResult(r)
}

func cmdFunnelReserve(c *conn, args [][]byte) {
	f, _, err := parseLimitArgs(args[2:], useReserve)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	rv, r, err := c.s.lim.Reserve(context.Background(), storeKey(args[1]), f.limit, f.n, f.ttl)
	if err != nil {
		if !c.fellBack(err) {
			return
		}
		// A fallback records no reservation.
		rv, r = funnel.Reservation{}, c.s.cfg.Fail.Fallback(f.limit)
	}
	if r.Allowed {
		c.batch.ledger.reservesAdmitted++
	} else {
		c.batch.ledger.reservesRefused++
	}
	if c.decided(&r) {
		return
	}
	c.wr.WriteArray(8)
	c.writeFamInts(r)
	if rv.ID != "" {
		c.wr.WriteBulkString(rv.ID)
	} else {
		c.wr.WriteNull()
	}
}

// parseSettle parses FUNNEL.SETTLE's actual amount (args[3]; args[0] is
// the command): an integer of at least 0, with FUNNEL.CHARGE's errors for
// its QUANTITY. The id is the store's to find.
func parseSettle(args [][]byte) (int64, error) {
	if len(args) != 4 {
		return 0, errors.New("ERR wrong number of arguments for 'funnel.settle' command")
	}
	return parseFamInt("actual", args[3])
}

func cmdFunnelSettle(c *conn, args [][]byte) {
	actual, err := parseSettle(args)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	st, err := c.s.lim.Settle(context.Background(), storeKey(args[1]), string(args[2]), actual)
	if err != nil {
		// Not a decision: an unknown or expired id, or an actual whose
		// debt does not fit, is the client's error; a store that cannot
		// record the settle answers the fail-closed error, never a
		// fallback.
		if errors.Is(err, funnel.ErrUnknownReservation) {
			c.batch.ledger.settlesUnknown++
		}
		c.replyError(err)
		return
	}
	switch {
	case st.Again:
		c.batch.ledger.settlesAgain++
	case !st.Result.Allowed:
		c.batch.ledger.settles++
		c.batch.ledger.settlesInDebt++
	default:
		c.batch.ledger.settles++
	}
	c.wr.WriteArray(8)
	c.writeFamInts(st.Result)
	c.wr.WriteInt(b2i(st.Again))
}

// maxAllowAll is the most limits one FUNNEL.ALLOWALL takes.
const maxAllowAll = 64

func cmdFunnelAllowAll(c *conn, args [][]byte) {
	n, err := parseFamInt("numlimits", args[1])
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	if n == 0 || n > maxAllowAll {
		c.wr.WriteError(fmt.Sprintf("ERR numlimits must be between 1 and %d", maxAllowAll))
		return
	}
	reqs := make([]funnel.Request, 0, n)
	rest := args[2:]
	for len(rest) > 0 {
		if len(rest) < 2 || !strings.EqualFold(string(rest[0]), "LIMIT") {
			c.wr.WriteError(errSyntax.Error())
			return
		}
		f, used, err := parseLimitArgs(rest[2:], useAllowAll)
		if err != nil {
			c.wr.WriteError(err.Error())
			return
		}
		reqs = append(reqs, funnel.Request{Key: funnel.StoreKey("", string(rest[1])), Limit: f.limit, N: f.n})
		rest = rest[2+used:]
	}
	if int64(len(reqs)) != n {
		c.wr.WriteError(fmt.Sprintf("ERR numlimits is %d but %d LIMIT blocks were given", n, len(reqs)))
		return
	}
	m, err := c.s.lim.AllowAll(context.Background(), reqs)
	if err != nil {
		if !c.fellBack(err) {
			return
		}
		open := c.s.cfg.Fail == funnel.FailOpen
		m = funnel.MultiResult{Allowed: open, Refused: -1, Results: make([]funnel.Result, len(reqs))}
		for i := range reqs {
			m.Results[i] = c.s.cfg.Fail.Fallback(reqs[i].Limit)
		}
		if !open {
			m.Refused = 0
		}
	}
	c.count(m.Allowed)
	for i := range m.Results {
		r := &m.Results[i]
		if c.fallback(r) {
			return
		}
		m.RetryAfter = max(m.RetryAfter, r.RetryAfter)
	}
	retry := retryMillis(m.Allowed, m.RetryAfter)
	c.wr.WriteArray(4)
	c.wr.WriteInt(b2i(m.Allowed))
	c.wr.WriteInt(int64(m.Refused))
	c.wr.WriteInt(retry)
	c.wr.WriteArray(len(m.Results))
	for _, r := range m.Results {
		c.writeFamResult(r)
	}
}

// maxLeaseID is the longest lease id FUNNEL.ACQUIRE accepts: the stores'
// (every edge takes the same).
const maxLeaseID = funnel.MaxLeaseIDLen

// acquireArgs are FUNNEL.ACQUIRE's arguments.
type acquireArgs struct {
	limit funnel.Limit
	id    []byte // nil: a random id
}

// parseAcquire parses "key count ttl_ms [ID lease_id] [BURST n] [DELAY ms]"
// (args[0] is the command) into a concurrency limit that a funnel.Spec
// builds, as the other edges build theirs.
func parseAcquire(args [][]byte) (acquireArgs, error) {
	if len(args) < 4 || len(args)%2 != 0 {
		return acquireArgs{}, errors.New("ERR wrong number of arguments for 'funnel.acquire' command")
	}
	count, err := parseFamInt("count", args[2])
	if err != nil {
		return acquireArgs{}, err
	}
	ttl, err := parseMillis("ttl", args[3])
	if err != nil {
		return acquireArgs{}, err
	}
	spec := funnel.Spec{Algorithm: funnel.Concurrency.String(), Count: count, Period: ttl}
	var a acquireArgs
	for i := 4; i < len(args); i += 2 {
		v := args[i+1]
		switch strings.ToUpper(string(args[i])) {
		case "ID":
			if len(v) == 0 || len(v) > maxLeaseID {
				return acquireArgs{}, fmt.Errorf("ERR lease id must be 1 to %d bytes", maxLeaseID)
			}
			a.id = v
		case "BURST":
			var b int64
			b, err = parseFamInt("burst", v)
			spec.Burst = &b
		case "DELAY":
			spec.UnitDelay, err = parseMillis("delay", v)
		default:
			return acquireArgs{}, errSyntax
		}
		if err != nil {
			return acquireArgs{}, err
		}
	}
	if a.limit, err = spec.Limit(); err != nil {
		return acquireArgs{}, limitError(err)
	}
	return a, nil
}

func cmdFunnelAcquire(c *conn, args [][]byte) {
	a, err := parseAcquire(args)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	ctx := context.Background()
	var (
		lease funnel.Lease
		r     funnel.Result
	)
	if a.id != nil {
		lease, r, err = c.s.lim.AcquireID(ctx, funnel.StoreKey("", string(args[1])), a.limit, string(a.id))
	} else {
		lease, r, err = c.s.lim.Acquire(ctx, funnel.StoreKey("", string(args[1])), a.limit)
	}
	if err != nil {
		if !c.fellBack(err) {
			return
		}
		r = c.s.cfg.Fail.Fallback(a.limit)
		// Admitted without the store, the lease has an id all the same,
		// as a store's own fallback answers: the caller's, or a new one,
		// which the client releases (the store, which holds nothing under
		// it, then says it was not held).
		lease.ID = string(a.id)
		if lease.ID == "" {
			lease.ID = fallbackLeaseID()
		}
	}
	if c.decided(&r) {
		return
	}
	retry := retryMillis(r.Allowed, r.RetryAfter)
	c.wr.WriteArray(7)
	c.wr.WriteInt(b2i(r.Allowed))
	c.wr.WriteInt(r.Limit)
	c.wr.WriteInt(r.Remaining)
	c.wr.WriteInt(retry)
	c.wr.WriteInt(resetMillis(r))
	if r.Allowed {
		c.wr.WriteBulkString(lease.ID)
	} else {
		c.wr.WriteNull()
	}
	c.wr.WriteInt(millisUp(r.Delay))
}

func cmdFunnelRelease(c *conn, args [][]byte) {
	lease := funnel.Lease{Key: funnel.StoreKey("", string(args[1])), ID: string(args[2])}
	var (
		held bool
		err  error
	)
	switch len(args) {
	case 3:
		held, err = c.s.lim.Release(context.Background(), lease)
	case 5:
		if !strings.EqualFold(string(args[3]), "LATENCY") {
			c.wr.WriteError(errSyntax.Error())
			return
		}
		var latency time.Duration
		if latency, err = parseMillis("latency", args[4]); err != nil {
			c.wr.WriteError(err.Error())
			return
		}
		held, err = c.s.lim.ReleaseAfter(context.Background(), lease, latency)
	default:
		c.wr.WriteError("ERR wrong number of arguments for 'funnel.release' command")
		return
	}
	if err != nil {
		c.replyError(err)
		return
	}
	c.wr.WriteInt(b2i(held))
}

func cmdFunnelRefund(c *conn, args [][]byte) {
	f, _, err := parseLimitArgs(args[2:], useRefund)
	if err != nil {
		c.wr.WriteError(err.Error())
		return
	}
	if err := c.s.lim.Refund(context.Background(), storeKey(args[1]), f.limit, f.n); err != nil {
		c.replyError(err)
		return
	}
	c.wr.WriteSimpleString("OK")
}

func cmdFunnelBans(c *conn, _ [][]byte) {
	bans, err := c.s.lim.Bans(context.Background())
	if err != nil {
		c.replyError(err)
		return
	}
	c.wr.WriteArray(len(bans))
	for _, b := range bans {
		c.wr.WriteArray(2)
		c.wr.WriteBulkString(b.Key)
		c.wr.WriteInt(millisUp(time.Duration(b.Until.UnixNano())))
	}
}

func cmdFunnelUnban(c *conn, args [][]byte) {
	was, err := c.s.lim.Unban(context.Background(), storeKey(args[1]))
	if err != nil {
		c.replyError(err)
		return
	}
	c.wr.WriteInt(b2i(was))
}

// fallbackLeaseID returns a random lease id of 32 hex digits, as
// Limiter.Acquire makes them, for a lease admitted by Config.Fail without
// the store.
func fallbackLeaseID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
