package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Deadlines.
//
// A script call that this process gives up on (its timeout passed: the
// decision is answered with the fallback, and over RESP with "-TRYAGAIN …
// the request was not decided") may still run later: a Redis that was
// frozen (a stopped process, a long fork, a stalled disk) finds the call in
// its socket buffer when it resumes, and would charge the key. So that the
// answer stays true, each decision's call carries its deadline, in Redis's
// clock, and the script compares it with Redis's TIME before it reads or
// writes any key (see now.lua): a call that starts after its deadline
// changes nothing, and answers an error (errLate).
//
// The deadline is this process's, less a quarter of the store's timeout for
// the reply's way back, moved to Redis's clock by an offset measured with
// TIME: the least of three measures (Redis's time minus this host's time
// after the reply, which is never later than the true offset), so that a
// deadline is never later in Redis's clock than the instant this process
// gives up. The offset is measured by Check, then at most every
// clockEvery in the background, and again at once when a call comes back
// refused for its deadline (a clock stepped on either side). Until a first
// measure, calls go without a deadline.

// clockEvery is how often the offset of Redis's clock is measured again.
const clockEvery = 30 * time.Second

// clockRetry is the least time between two measures that failed.
const clockRetry = time.Second

// redisClock is the offset of Redis's clock from this host's.
type redisClock struct {
	offset    atomic.Int64 // µs: Redis's TIME minus this host's time, at most
	measured  atomic.Int64 // this host's time (Unix ns) of the last measure; 0: none
	tried     atomic.Int64 // this host's time (Unix ns) of the last attempt
	measuring atomic.Bool
	// skewed is this host's time (Unix ns) until which calls go without a
	// deadline: a call was refused for its deadline before it could have
	// been late, so some Redis's clock is ahead of the offset measured
	// (such as another node of a cluster). Never under a clock guard.
	skewed atomic.Int64
	// steps counts the measures that a clock guard did not take; warned
	// is the offset last warned of (0: none).
	steps, warned atomic.Int64
}

// errLate is the error of a script call that Redis started after its
// deadline: nothing was changed.
var errLate = errors.New("redisstore: Redis ran the script after its deadline (it changed nothing)")

// errClockStep is the error of a script call under a clock guard that
// found Redis's time before the window it expected, and of a measure of
// the clock's offset that the guard did not take: nothing was changed.
var errClockStep = errors.New("redisstore: Redis's clock is not where the clock guard expects it (it changed nothing)")

// timeScript answers Redis's TIME as two integers.
var timeScript = newScript("local t = redis.call('TIME')\nreturn {t[1] + 0, t[2] + 0}")

// measureClock measures the offset of Redis's clock from this host's.
func (s *Store) measureClock(ctx context.Context) error {
	s.clock.tried.Store(time.Now().UnixNano())
	var best time.Duration
	var offset int64
	for i := range 3 {
		before := time.Now()
		v, err := s.runner.eval(ctx, timeScript, []string{s.prefix + checkKey}, nil)
		after := time.Now()
		if err != nil {
			return err
		}
		if len(v) != 2 || v[0] < 0 || v[1] < 0 || v[1] >= 1e6 {
			return fmt.Errorf("%w: TIME answered %v", errInternal, v)
		}
		if rtt := after.Sub(before); i == 0 || rtt < best {
			best, offset = rtt, v[0]*1e6+v[1]-after.UnixMicro()
		}
	}
	if s.clock.measured.Load() != 0 {
		step := time.Duration(offset-s.clock.offset.Load()) * time.Microsecond
		if s.guard > 0 && (step > time.Duration(s.guard)*time.Microsecond || step < -time.Duration(s.guard)*time.Microsecond) {
			// Not taken: the calls keep the window of the offset taken
			// before, which Redis's TIME is now out of, and fall back.
			s.clock.steps.Add(1)
			if s.clock.warned.Swap(offset) != offset {
				s.log.Warn("redisstore: Redis's clock moved against this host's by more than the clock guard: decisions fall back until the clocks agree again or this process restarts", "step", step, "guard", time.Duration(s.guard)*time.Microsecond)
			}
			return errClockStep
		}
		s.clock.warned.Store(0)
		if step > clockStepWarn || step < -clockStepWarn {
			// Decisions age every state by a forward step (see the
			// README's Clocks); say so, once per step.
			s.log.Warn("redisstore: Redis's clock moved against this host's since the last measure (one of them was stepped)", "step", step)
		}
	}
	s.clock.offset.Store(offset)
	s.clock.measured.Store(time.Now().UnixNano())
	return nil
}

// clockStepWarn is the least move of Redis's clock against this host's,
// between two measures, that is logged.
const clockStepWarn = time.Second

// remeasureClock measures the clock's offset again in the background,
// unless a measure is under way or one failed less than clockRetry ago.
func (s *Store) remeasureClock() {
	if time.Now().UnixNano()-s.clock.tried.Load() < int64(clockRetry) || !s.clock.measuring.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.clock.measuring.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 3*s.timeout)
		defer cancel()
		s.measureClock(ctx) // a failure leaves the last offset (or none)
	}()
}

// stampDeadline writes into args, the arguments of a call of sc, the
// deadline of a call that must start by the local time deadline (its
// caller's, less the margin for the reply: see margin), when sc reads
// Redis's TIME (not an injected clock) and the clock's offset is known.
func (s *Store) stampDeadline(sc *script, args []string, deadline time.Time) {
	if sc.ti < 0 || s.now != nil || args[sc.ti] != "" {
		return
	}
	if s.guard == 0 && time.Now().UnixNano() < s.clock.skewed.Load() {
		return
	}
	m := s.clock.measured.Load()
	if m == 0 || time.Now().UnixNano()-m > int64(clockEvery) {
		s.remeasureClock()
		if m == 0 {
			return
		}
	}
	offset := s.clock.offset.Load()
	dl := deadline.UnixMicro() + offset
	args[sc.ti], args[sc.ti+1] = "-", strconv.FormatInt(dl, 10)
	if s.guard > 0 {
		// The earliest Redis time the call may find: this host's now on
		// Redis's clock (the offset is never above the true one), less
		// the guard. The deadline is the latest.
		args[sc.ti] = "~" + strconv.FormatInt(time.Now().UnixMicro()+offset-s.guard, 10)
	}
}

// margin is the part of a call's time left until deadline that is kept
// for the reply's way back: a quarter of the store's timeout, or of the
// time left when the caller's deadline is nearer (a deadline moved back by
// a quarter of a timeout longer than the time left would be in the past,
// and every call late).
func (s *Store) margin(deadline time.Time) time.Duration {
	return max(min(s.timeout/4, time.Until(deadline)/4), 0)
}

// evalBy runs sc until deadline (no bound when zero), which the call
// carries to Redis (see stampDeadline): through Funnel's module where sc
// has a command of it and Redis has loaded it (see module.go), else through
// the script.
func (s *Store) evalBy(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	start, ok := ctx.Deadline()
	if ok {
		start = start.Add(-s.margin(start))
		s.stampDeadline(sc, args, start)
	}
	var v []int64
	var err error
	if try, seen := s.useModule(sc); try {
		v, err = s.runner.command(ctx, sc.module, keys, args)
		if moduleMissing(err) {
			s.moduleAbsent(sc, err)
			v, err = s.runner.eval(ctx, sc, keys, args)
		} else if err == nil || errors.Is(err, ErrWrongType) || errors.Is(err, errLate) || errors.Is(err, errClockStep) {
			// The module answered (a decision, or a refusal of its own).
			s.moduleAnswered(sc, seen)
		}
	} else {
		v, err = s.runner.eval(ctx, sc, keys, args)
	}
	if errors.Is(err, errClockStep) {
		s.remeasureClock()
	}
	if errors.Is(err, errLate) {
		if s.guard == 0 && ok && time.Now().Before(start) {
			// Refused before its deadline here: not late, but a Redis
			// whose clock is ahead of the offset measured. Calls go
			// without deadlines for a while rather than fail.
			s.clock.skewed.Store(time.Now().Add(clockEvery).UnixNano())
			s.log.Warn("redisstore: a Redis clock is ahead of the offset measured (a cluster's nodes apart?): decisions carry no deadline for a while", "for", clockEvery)
		}
		s.remeasureClock()
	}
	return v, err
}

// isLate reports whether msg is the error reply of a call that started
// after its deadline (see now.lua).
func isLate(msg string) bool { return strings.HasPrefix(msg, "DEADLINE funnel:") }

// isClockStep reports whether msg is the error reply of a call under a
// clock guard that found Redis's time before the window it expected (see
// now.lua).
func isClockStep(msg string) bool { return strings.HasPrefix(msg, "CLOCKSTEP funnel:") }
