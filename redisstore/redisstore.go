// Package redisstore is a funnel.Store on Redis: the
// state of every key lives in Redis, so that any number of processes share
// it. It works on a single Redis, on Sentinel, on Redis Cluster and over a
// go-redis Ring, through go-redis (New, Open) or rueidis (NewRueidis).
//
// # Scripts
//
// Every operation is one round trip: one Lua script, embedded in the
// package, run by EVALSHA and loaded again on NOSCRIPT (after a restart, or
// a failover to a replica that never saw it), reads its keys, takes Redis's
// TIME as the clock, decides, and writes the new state with its expiry,
// atomically.
//
//   - gcra.lua makes the funnel's decisions (one op of Do, a funnel
//     without a ban): the decision of
//     gcra.Decide, reproduced bit for bit, for one key or a batch. Lua
//     numbers are doubles, exact only to 2^53, so it works on nanoseconds
//     split into two limbs (seconds and nanoseconds); Go computes the cost
//     and the tolerance before the call, and the whole Result after it from
//     the time to a full bucket that the script saw. Its one-key path and its
//     batch loop read a TAT, decide and write by the same text, written once
//     in tat.lua, decide.lua and store.lua and written into both paths when
//     the package starts: Redis runs it inline, as a call of a local function
//     would cost it more per decision (see the script's header).
//   - family.lua runs the rest of the family (Do): the windows, the sliding
//     log, the leaky bucket, leases, the funnel with a ban, and several limits
//     at once, all or nothing. It decides admission and keeps the state by
//     the rules of package algo; Go computes every number of the results from
//     the state the script reports.
//   - keyops.lua serves TTL and Reset for a key of any algorithm, and deletes
//     the empty state of another algorithm that a funnel's decision finds on
//     its key (an empty state reads as absent, whatever algorithm left it).
//   - Two small scripts lift a ban (Unban) and list the bans of one node
//     (Bans, on every master in turn).
//
// # Keys
//
// A funnel's key, and a leaky bucket's, has redis-cell's format: a string
// holding the theoretical arrival time (TAT) as a decimal count of
// nanoseconds since the Unix epoch, expiring when the TAT is reached (in
// whole milliseconds, rounded up). A deployment can move from redis-cell's
// CL.THROTTLE to Funnel, or run both on the same keys during the move,
// without resetting any limit. A fixed window is the string
// "F<start_ms>:<end_ms>:<n>", a sliding window counter
// "S<start_ms>:<period_ms>:<prev>:<cur>"; a sliding log is a sorted set of
// one member per admitted unit scored by its millisecond, and a concurrency
// key a sorted set of lease ids scored by their expiry, each with a marker
// member that names its kind. A ban is the decimal nanosecond of its end,
// under "{tag}" + prefix + "ban:" + key, where the tag puts it in the hash
// slot of its key. A funnel leased in rate shares (Share) keeps them in a
// hash beside its key in its slot, one field per node (see Share); the key
// itself is not written. Every key expires when its state is empty, and
// Options.Prefix is prepended to every key. A key that holds anything else
// is an error that wraps ErrWrongType, and is left as it is.
//
// # Batches
//
// Funnel decisions (one op of Do, a funnel without a ban, the commonest
// call) that wait for Redis at the same time are batched: one
// gcra.lua call decides up to 64 of them in order of arrival (on Redis
// Cluster, those of one hash slot; over a Ring, each goes alone), so that
// Redis reads the time, runs the script and answers once per batch, each
// decision seeing those before it. A decision that finds none in flight is
// sent at once, so batching adds no latency to an idle store. Any other Do
// call is one family.lua call of its own; its keys must share a hash slot
// on Redis Cluster (a {hash tag}).
//
// # When Redis cannot be reached
//
// Do, TTL, Reset and Unban are bounded by Options.Timeout, a decision's
// wait for a batch included. Bans, which scans every master's keys, is
// bounded by its context only: on a large database it may take longer than
// a decision should. When Redis cannot
// be reached in time, the takes of Do do not fail: they return the
// configured fail-open or fail-closed
// answer with Result.Fallback set, and the failure is logged at most once a
// second. A refund, TTL, Reset, Unban and Bans return an error that wraps
// funnel.ErrUnavailable instead. Check, called once at start, reads a key
// through a script and returns the reason Redis cannot serve (a wrong
// password, a missing database, no Redis), so that a program can refuse to
// start rather than answer every decision with the fallback.
//
// For tests, Options.Now replaces Redis's clock with an injected one: the
// scripts take now as an argument, so that the conformance suite runs the
// same cases, at the same instants, against this store and memstore.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/algo"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/internal/lograte"
)

// gcraSource is gcra.lua with its parts written in (see include).
var gcraSource = include("gcra.lua")

// gcraScript is run by SHA, and sent whole when Redis answers NOSCRIPT.
var gcraScript = redis.NewScript(gcraSource)

// DefaultTimeout is the time a decision may take when Options.Timeout is 0.
const DefaultTimeout = 100 * time.Millisecond

// nowSlack lengthens every expiry when Options.Now is set: Redis expires keys
// by its own clock, which does not follow the injected one, and a key must not
// vanish while a test's clock stands still. Decisions compare TATs with the
// injected time, so a key that outlives its TAT changes nothing.
const nowSlack = 10 * time.Minute

// ErrWrongType is wrapped by the error of an operation on a key that holds
// something other than the state it reads: for a funnel, anything but a TAT
// (a string that is not a decimal number, a number beyond int64 nanoseconds,
// a value of another type such as a list or a hash); for the rest of the
// family, the live state of another algorithm, or anything that is not the
// state of one. The key is left as it is. Its text starts with "WRONGTYPE", as Redis's own
// error for a key of the wrong type does.
//
// It is also funnel.ErrWrongType: errors.Is reports both.
var ErrWrongType error = wrongTypeError{}

type wrongTypeError struct{}

func (wrongTypeError) Error() string {
	return "WRONGTYPE redisstore: key holds something other than a TAT"
}

// Is makes the error funnel.ErrWrongType as well.
func (wrongTypeError) Is(target error) bool { return target == funnel.ErrWrongType }

// Client is the part of a go-redis client that the store uses:
// *redis.Client, *redis.ClusterClient, *redis.Ring and redis.UniversalClient
// all satisfy it.
//
// A Ring shards keys by its own hash, so over a Ring each decision goes alone
// rather than in a batch. A Ring has no replicas: while one of its nodes
// fails its heartbeat, the Ring sends that node's keys to the others, where
// they start with a full bucket, and sends them back, to whatever state that
// node kept, when it answers again. A limit over a Ring is exact while its
// nodes stay up, and a key may get a fresh burst each time its node leaves
// or rejoins the Ring; use Redis Cluster or Sentinel where that matters.
type Client interface {
	redis.Scripter
}

// Options configure a Store. The zero value is a fail-closed store with a
// 100 ms timeout, no key prefix, logging to slog.Default().
type Options struct {
	// Prefix is prepended to every key. On Redis Cluster it should not
	// contain '{', so that a key's own hash tag still picks its slot.
	Prefix string
	// Timeout bounds each operation (DefaultTimeout if 0; no bound of the
	// store's own if negative): a decision falls back once it has waited
	// that long, its wait for a batch and the batch's script call together. It bounds network waits only if the
	// client honours context deadlines: clients built by Open do; set
	// ContextTimeoutEnabled on a go-redis client passed to New.
	Timeout time.Duration
	// Fail is what a decision answers when Redis cannot be reached in
	// time: funnel.FailClosed (the zero value, the default) refuses it,
	// funnel.FailOpen admits it; either with Result.Fallback set.
	Fail funnel.FailMode
	// Logger receives a warning when Redis cannot be reached, at most once a
	// second (slog.Default() if nil).
	Logger *slog.Logger
	// ClockGuard, when positive, refuses to follow a step of Redis's
	// clock (or of this host's) larger than it. Every decision's call then
	// carries the window of Redis times it expects, from the offset of
	// Redis's clock measured when the store started (Check, or the first
	// call); a script that finds Redis's TIME outside it changes nothing,
	// and the decision answers the fallback (Fail). A new measure of the
	// offset that moved by more than ClockGuard is not taken: decisions
	// keep falling back, with a warning, until the clocks agree again
	// (the step undone) or the process restarts, which takes the clock as
	// it finds it. Without a guard (the default) a step is followed within
	// one call, and a forward step ages every key's state by its size (see
	// the README's Clocks). A guard below a second or so mistakes a slow
	// round trip or a clock's slew for a step.
	ClockGuard time.Duration
	// SortedSetLogs keeps every sliding log in a sorted set, as versions
	// before packed logs did, and turns the packed logs it meets back into
	// sorted sets. By default a log of a count up to 256 is a packed
	// string (one GET and one write a decision, six bytes an entry), which
	// an older version answers with WRONGTYPE: set it on the processes of
	// this version while older ones still decide the same keys (an upgrade
	// or a rollback under way), and clear it once they are gone.
	SortedSetLogs bool
	// ScriptOnly decides the funnel's requests through the Lua script
	// even when Redis has loaded Funnel's module (see module/funnel.c),
	// which a store otherwise uses, for less of Redis's CPU per decision.
	// The two decide alike and leave the same keys.
	ScriptOnly bool
	// Now, for tests only, replaces Redis's TIME as the clock of every
	// decision (nanoseconds since the Unix epoch, not negative). Redis still
	// expires keys by its own clock, so with Now set every expiry is
	// lengthened by ten minutes; decisions compare TATs with Now and are
	// unaffected.
	Now func() int64
}

// Store is a funnel.Store on Redis. It is safe for
// concurrent use. The zero value is not usable: build a Store with New, Open
// or NewRueidis.
type Store struct {
	runner   runner
	closer   io.Closer // the client, when the store built it
	prefix   string
	timeout  time.Duration
	failOpen bool // Options.Fail is funnel.FailOpen
	fail     funnel.FailMode
	log      *slog.Logger
	now      func() int64
	slack    string // ARGV[4] of the script: milliseconds added to expiries
	slackMs  int64  // the same, as a number
	// logPack is the largest count of a packed sliding log (see
	// Options.SortedSetLogs): defaultLogPack, 0 with SortedSetLogs, or what
	// a test sets.
	logPack int64
	// concRead is the most leases a concurrency key may hold for conc.lua
	// to read it whole, with one command (defaultConcRead, or what a test
	// sets).
	concRead int64

	clock     redisClock         // the offset of Redis's clock, for deadlines
	guard     int64              // Options.ClockGuard in µs; 0: none
	batches   batcher            // funnels' decisions (gcra.lua)
	wbatches  batcher            // windows' takes (window.lua)
	module    moduleState        // Funnel's Redis module (module.go)
	batched   atomic.Int64       // decisions made in batches of more than one
	logs      *lograte.Sometimes // failures, at most one record per logInterval
	fallbacks atomic.Int64
}

var _ funnel.Store = (*Store)(nil)

// New returns a store that keeps its state in Redis through client, a
// go-redis client. Closing the store does not close client.
func New(client Client, opts Options) *Store {
	return newStore(goRedisRunner{client}, opts)
}

func newStore(r runner, opts Options) *Store {
	s := &Store{
		runner:   r,
		batches:  batcher{groups: map[uint16]*group{}},
		wbatches: batcher{groups: map[uint16]*group{}},
		prefix:   opts.Prefix,
		timeout:  opts.Timeout,
		failOpen: opts.Fail == funnel.FailOpen,
		fail:     opts.Fail,
		log:      opts.Logger,
		now:      opts.Now,
		slack:    "0",
		logs:     lograte.New(logInterval),
		guard:    max(opts.ClockGuard.Microseconds(), 0),
		logPack:  defaultLogPack,
		concRead: defaultConcRead,
	}
	if opts.SortedSetLogs {
		s.logPack = 0
	}
	s.module.off = opts.ScriptOnly
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now != nil {
		s.slackMs = nowSlack.Milliseconds()
		s.slack = strconv.FormatInt(s.slackMs, 10)
	}
	return s
}

// Close closes the client if Open built it; a store built by New leaves its
// client open.
func (s *Store) Close() error {
	if s.closer == nil {
		return nil
	}
	return s.closer.Close()
}

// Fallbacks returns the number of decisions (the ops of Do calls) that
// returned a fallback answer because Redis could not be reached.
func (s *Store) Fallbacks() int64 { return s.fallbacks.Load() }

// throttle decides a request for quantity units of key under the funnel p
// at Redis's current time through gcra.lua, batched with the decisions
// waiting at the same moment: Do's path for one funnel op without a ban,
// the commonest call, and for one take on a delaying bucket without a ban
// (delay ≥ 0: its delay units; -1 for a funnel), whose admission and state
// are the funnel's. If Redis cannot be reached within the timeout, the
// result has Fallback set, Allowed is the fail-open or fail-closed answer,
// and the error is nil. A negative quantity is a refund, never past a full
// bucket (see gcra.Decide). The error is gcra.ErrOverflow for a request
// that cannot be applied, wraps ErrWrongType for a key that holds something
// other than a TAT (a key that holds the state of another algorithm of the
// family reads as absent once that state is empty, as in family.lua), or is
// the context's error when ctx ended first.
func (s *Store) throttle(ctx context.Context, key string, p gcra.Params, quantity, delay int64) (funnel.Result, error) {
	cost, err := gcra.Cost(p, quantity)
	if err != nil {
		return funnel.Result{}, err
	}
	status, d, err := s.decide(ctx, key, cost, p.Tolerance)
	if errors.Is(err, ErrWrongType) && s.clearEmpty(ctx, key) {
		// The key held another algorithm's state, empty now: it reads as
		// absent (see funnel.Store), and is gone.
		status, d, err = s.decide(ctx, key, cost, p.Tolerance)
	}
	if err != nil {
		if err := s.fallsBack(ctx, err); err != nil {
			return funnel.Result{}, err
		}
		return funnel.Result{Fallback: true, Allowed: s.failOpen, Limit: p.Limit}, nil
	}
	// The result depends on the time and the TAT only through d = max(TAT -
	// now, 0); so gcra.Decide at now 0 with TAT d answers exactly as at the
	// real now and TAT, but for the overflow of the new TAT past 2^63-1,
	// which the script reports (status 2), having written nothing.
	_, r, derr := gcra.Decide(0, d, p, quantity)
	switch {
	case derr != nil || status > 2 || r.Allowed != (status >= 1):
		return funnel.Result{}, fmt.Errorf("%w: the script answered status %d where gcra.Decide answers %+v, %v (TAT - now %d, quantity %d, %+v)",
			errInternal, status, r, derr, d, quantity, p)
	case status == 2:
		return funnel.Result{}, gcra.ErrOverflow
	case delay >= 0:
		// A delaying bucket: the funnel's admission, and its delay.
		_, ar, err := algo.LeakyDecide(0, d, p, delay, quantity)
		if err != nil {
			return funnel.Result{}, err
		}
		return funnel.ResultOfAlgo(p.Limit, ar), nil
	}
	return funnel.ResultOf(p, r), nil
}

// fallsBack takes the error of one decision's script call: it returns the
// error to answer (a key of another kind, a bug, the caller's context
// ended), or nil when the decision falls back (Redis could not be reached
// in time), which it counts and notes.
func (s *Store) fallsBack(ctx context.Context, err error) error {
	if errors.Is(err, ErrWrongType) || errors.Is(err, errInternal) {
		return err
	}
	if err := callerDone(ctx); err != nil {
		return err
	}
	s.fallbacks.Add(1)
	s.failed(err)
	return nil
}

// limb formats one limb of a time for the script (a few digits; Lua reads it
// exactly).
func limb(v int64) string { return strconv.FormatInt(v, 10) }

// appendLimbs appends v in nanoseconds as the script's two limbs, h*1e9 + l
// with 0 <= l < 1e9: whole seconds rounded down (negative for a negative v,
// such as a refund's cost) and the nanoseconds above them.
func appendLimbs(args []string, v int64) []string {
	h, l := v/1e9, v%1e9
	if l < 0 {
		h, l = h-1, l+1e9
	}
	return append(args, limb(h), limb(l))
}

// Reset deletes key and reports whether it held state (a TAT after now, or
// a live state of another algorithm of the family). A key that holds
// anything else is left as it is, with an error wrapping ErrWrongType. When
// Redis cannot be reached the error wraps funnel.ErrUnavailable.
func (s *Store) Reset(ctx context.Context, key string) (bool, error) {
	left, err := s.keyop(ctx, key, "x")
	if err != nil {
		return false, s.unavailable(ctx, err)
	}
	return left > 0, nil
}

// TTL returns the time until key's bucket is full again (for the rest of
// the family: until its state is empty), and false when the key holds no
// state. When Redis cannot be reached the error wraps
// funnel.ErrUnavailable.
func (s *Store) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	left, err := s.keyop(ctx, key, "p")
	if err != nil {
		return 0, false, s.unavailable(ctx, err)
	}
	return left, left > 0, nil
}

// checkKey is the key Check reads: one that no decision uses.
const checkKey = "\x00funnel:check"

// Check reads one key through a script of the store, as TTL would, and
// returns the error that prevents it: a Redis that cannot be reached, a
// wrong password or user, a database that does not exist, a server that
// refuses scripts. A program calls it at start, to refuse to start with the
// reason rather than answer every decision with the fallback. The time it
// may take is ctx's, not the store's timeout (a first connection may take
// longer than a decision). The error wraps funnel.ErrUnavailable.
func (s *Store) Check(ctx context.Context) error {
	args, err := s.args("p", 0)
	if err != nil {
		return err
	}
	// (A short command: Redis answers a long one from a client that has not
	// authenticated with a protocol error rather than NOAUTH.)
	_, err = s.runner.eval(ctx, keyopsScript, []string{s.prefix + checkKey}, args[:3])
	if err == nil || errors.Is(err, ErrWrongType) {
		if s.now != nil {
			return nil
		}
		// Decisions carry their deadlines in Redis's clock from now on.
		if err = s.measureClock(ctx); err == nil {
			return nil
		}
	}
	return fmt.Errorf("redisstore: %w: %w", funnel.ErrUnavailable, err)
}

// errInternal marks replies that the script cannot give: a bug, never an
// outage.
var errInternal = errors.New("redisstore: internal error")

// familyArgs returns family.lua's first three arguments: now, and the
// slack plus the largest count of a packed log times 10^7 plus the most
// leases read whole times 10^10 (see family.lua).
func (s *Store) familyArgs() ([]string, error) {
	args, err := s.args("", 0)
	if err != nil {
		return nil, err
	}
	args = args[1:]
	args[2] = strconv.FormatInt(s.slackMs+s.logPack*1e7+s.concRead*1e10, 10)
	return args, nil
}

// args returns the script's first four arguments for operation op on n keys,
// with room for the throttle's arguments of each key.
func (s *Store) args(op string, n int) ([]string, error) {
	args := make([]string, 0, 4+5*n)
	args = append(args, op)
	if s.now != nil {
		now := s.now()
		if now < 0 {
			return nil, fmt.Errorf("%w: Options.Now returned %d, before the Unix epoch", errInternal, now)
		}
		args = append(args, limb(now/1e9), limb(now%1e9))
	} else {
		args = append(args, "", "")
	}
	return append(args, s.slack), nil
}

// evalTimed runs sc bounded by the store's timeout as well as by ctx; the
// call carries its deadline to Redis (see stampDeadline).
func (s *Store) evalTimed(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return s.evalBy(ctx, sc, keys, args)
}

// decodeLimbs decodes a status and d given on two limbs.
func decodeLimbs(status, sec, nsec int64) (int64, int64, error) {
	if status < 0 || status > 2 || sec < 0 || sec > math.MaxInt64/int64(time.Second) || nsec < 0 || nsec >= 1e9 || sec*1e9 > math.MaxInt64-nsec {
		return 0, 0, fmt.Errorf("%w: script answer {%d %d %d}", errInternal, status, sec, nsec)
	}
	return status, sec*1e9 + nsec, nil
}

// wrongType turns a WRONGTYPE error reply into an error wrapping ErrWrongType.
func wrongType(msg string) error {
	detail := strings.TrimSpace(strings.TrimPrefix(msg, "WRONGTYPE"))
	if strings.HasPrefix(detail, "Operation against") {
		detail = "the value is not a string"
	}
	if i := strings.Index(detail, " script: "); i >= 0 {
		detail = detail[:i]
	}
	return fmt.Errorf("%w (%s)", ErrWrongType, detail)
}

// unavailable returns the error of a Reset or TTL that failed with err.
func (s *Store) unavailable(ctx context.Context, err error) error {
	if errors.Is(err, ErrWrongType) || errors.Is(err, errInternal) {
		return err
	}
	if err := callerDone(ctx); err != nil {
		return err
	}
	s.reload()
	return fmt.Errorf("redisstore: %w: %w", funnel.ErrUnavailable, err)
}

// callerDone returns the error of the caller's context if it has ended (or
// reached its deadline, whose timer may not have fired yet): a failure then
// is the caller's doing, not an outage.
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("redisstore: %w", context.DeadlineExceeded)
	}
	return nil
}

// reload tells the client that Redis failed, so that a cluster client reads
// its map of slots again.
func (s *Store) reload() { s.runner.failed() }

// failed records a failure that a decision answered with the fallback.
func (s *Store) failed(err error) {
	s.reload()
	s.logFailure(err)
}

// logInterval is the least time between two log records of failures.
const logInterval = time.Second

// logFailure logs err, unless a failure was logged less than logInterval
// ago: it is then only counted, and the count goes with the next record.
func (s *Store) logFailure(err error) {
	s.logs.Do(func(suppressed int64) {
		policy := "fail-" + s.fail.String()
		s.log.Warn("redisstore: Redis unavailable, answering with the fallback policy",
			"policy", policy, "err", err, "suppressed", suppressed)
	})
}

// SetGoRedisLogger sends the log lines of go-redis itself (it writes one
// for every failed connection attempt) to logger as warnings, at most one a
// second, with the count of the lines held back. It replaces go-redis's
// process-wide logger (redis.SetLogger), for every client in the process.
// It may be called again, also while clients run: go-redis's logger is
// replaced only the first time, and later calls change where it writes.
func SetGoRedisLogger(logger *slog.Logger) {
	theGoRedisLogger.log.Store(logger)
	setGoRedisLogger.Do(func() { redis.SetLogger(&theGoRedisLogger) })
}

var (
	theGoRedisLogger = goRedisLogger{limits: lograte.New(logInterval)}
	setGoRedisLogger sync.Once
)

type goRedisLogger struct {
	log    atomic.Pointer[slog.Logger]
	limits *lograte.Sometimes
}

func (l *goRedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.limits.Do(func(suppressed int64) {
		l.log.Load().WarnContext(ctx, fmt.Sprintf(format, v...), "suppressed", suppressed)
	})
}
