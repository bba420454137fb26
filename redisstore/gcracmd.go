package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// gcraCmdScript is Redis's GCRA command as a script (see gcracmd.lua).
var gcraCmdScript = newScript(include("gcracmd.lua"))

var _ funnel.GCRAStore = (*Store)(nil)

// GCRA applies one call of Redis's GCRA command to key (with Options.Prefix)
// at Redis's time, in one round trip (funnel.GCRAStore). The key is the
// command's own: the TAT in microseconds as a decimal string, expiring at
// the TAT's millisecond, so that a Redis that has the command and this store
// read each other's keys. The script reads the key, admits or refuses and
// writes as the command does; the reply is gcra.DecideCommand's, from the
// time and the TAT that the script saw.
//
// The error is one of gcra's ErrCommand errors, wraps ErrWrongType for a key
// of another type, or is the context's error when ctx ended first. When
// Redis cannot be reached within the timeout the result is the fallback
// (GCRAResult.Fallback), as Do's decisions are.
func (s *Store) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	if p.Interval < 1 || p.Limit < 1 || p.Increment < 0 || p.Variance < 0 {
		return funnel.GCRAResult{}, gcra.ErrCommandArgs
	}
	args := make([]string, 0, 7)
	expiry := ""
	if s.now != nil {
		now := s.now()
		if now < 0 {
			return funnel.GCRAResult{}, fmt.Errorf("%w: Options.Now returned %d, before the Unix epoch", errInternal, now)
		}
		args = append(args, strconv.FormatInt(now/1e6, 10))
		expiry = s.slack
	} else {
		args = append(args, "")
	}
	args = appendLimbs(args, p.Increment)
	args = appendLimbs(args, p.Variance)
	mode := ""
	if p.Overflow != nil {
		mode = "r"
	}
	args = append(args, mode, expiry)
	v, err := s.evalTimed(ctx, gcraCmdScript, []string{s.prefix + key}, args)
	if err != nil {
		if errors.Is(err, ErrWrongType) || errors.Is(err, errInternal) {
			return funnel.GCRAResult{}, err
		}
		if err := callerDone(ctx); err != nil {
			return funnel.GCRAResult{}, err
		}
		s.fallbacks.Add(1)
		s.failed(err)
		return s.gcraFallback(p), nil
	}
	if len(v) != 5 || v[2] < 0 || v[2] > 1 || v[1] < 0 || v[1] > math.MaxInt64/1000 || v[3] < 0 || v[4] < 0 || v[4] >= 1e9 {
		return funnel.GCRAResult{}, fmt.Errorf("%w: GCRA script reply %v", errInternal, v)
	}
	status, now, exists := v[0], v[1]*1000, v[2] == 1
	switch status {
	case -1:
		return funnel.GCRAResult{}, gcra.ErrCommandInvalidKey
	case -2:
		return funnel.GCRAResult{}, gcra.ErrCommandNegativeTime
	}
	if v[3] > math.MaxInt64/int64(1e9) {
		return funnel.GCRAResult{}, fmt.Errorf("%w: GCRA script reply %v", errInternal, v)
	}
	tat := v[3]*1e9 + v[4]
	_, r, stored, derr := gcra.DecideCommand(now, tat, exists, p)
	ok := false
	switch status {
	case 0, 1:
		ok = derr == nil && stored == (status == 1)
	case 2:
		ok = derr != nil && derr == p.Overflow
	case 3:
		ok = derr == gcra.ErrCommandTokensOverflow
	}
	if !ok {
		return funnel.GCRAResult{}, fmt.Errorf("%w: the GCRA script answered %v where gcra.DecideCommand answers %+v, stored %v, %v (%+v)",
			errInternal, v, r, stored, derr, p)
	}
	if derr != nil {
		return funnel.GCRAResult{}, derr
	}
	return funnel.GCRAResult{Reply: r}, nil
}

// gcraFallback is the answer of a GCRA call that Redis could not answer in
// time: a fresh key's reply, limited when the store fails closed.
func (s *Store) gcraFallback(p gcra.CommandParams) funnel.GCRAResult {
	_, r, _, _ := gcra.DecideCommand(0, 0, false, p)
	r.Limit, r.Limited = p.Limit, !s.failOpen
	return funnel.GCRAResult{Reply: r, Fallback: true}
}

// gcraKeyBound tells the two decimal TATs apart for TTL and Reset: a
// funnel's (redis-cell's nanoseconds) is after it, and a smaller number is
// the GCRA command's (microseconds, which pass 10^17 only in the year 5138).
const gcraKeyBound = 1e17

// gcraKeyTTL returns, for a key that holds the decimal number tat, the time
// until it is empty if it is the GCRA command's key: until the end of its
// TAT's millisecond, when Redis expires it (as the memory store counts it).
func gcraKeyTTL(now, tat int64) (time.Duration, bool) {
	if tat >= gcraKeyBound {
		return 0, false
	}
	end := (gcra.CommandExpiry(tat) + 1) * 1e6
	return time.Duration(max(end-now, 0)), true
}
