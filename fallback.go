package funnel

import (
	"context"
	"time"

	"github.com/funnelrl/funnel/gcra"
)

// FailMode is the one policy for a decision that the store cannot make (a
// store that is down or too slow: see Unavailable): every store that
// answers on its own (the Redis store) and every edge (RESP, HTTP, the
// middleware, Envoy's rate-limit service) takes one, and answers with
// FailMode.Fallback, a Result with Fallback set, which each edge marks as
// a fallback in its own protocol.
//
// The zero value, FailClosed, is the default everywhere: a limiter that
// cannot count does not admit, and says that it did not decide.
type FailMode uint8

// The fail modes.
const (
	// FailClosed refuses the request, with a result marked as a fallback
	// that no edge answers as a refusal by the limit: RESP answers
	// -TRYAGAIN (or a refusal with a reset after of -1), HTTP 503 with
	// Retry-After: 1, gRPC Unavailable. It is the default.
	FailClosed FailMode = iota
	// FailOpen admits the request, unlimited, with a result marked as a
	// fallback.
	FailOpen
)

// String returns "closed" or "open".
func (m FailMode) String() string {
	if m == FailOpen {
		return "open"
	}
	return "closed"
}

// FallbackRetry is the wait that an edge tells a client refused by a
// fail-closed fallback (Retry-After: 1, retry_after_ms 1000, CL.THROTTLE's
// retry after of 1): the store may answer again by then, and a wait of 0
// would invite an instant retry.
const FallbackRetry = time.Second

// Fallback returns the result that m answers in place of a decision of
// limit that the store could not make: Fallback set, Allowed under
// FailOpen, Limit the limit's capacity (0 for a limit that is not valid),
// and Remaining, RetryAfter and ResetAfter zero, as a store's own fallback
// results are.
func (m FailMode) Fallback(limit Limit) Result {
	r := Result{Fallback: true, Allowed: m == FailOpen}
	if c, err := limit.check(); err == nil {
		r.Limit = c.Capacity()
	}
	return r
}

// Unavailable reports whether err, returned by a Limiter or a Store for a
// call made under ctx, is the store's failure to decide: an error of
// ClassUnavailable, or a deadline of the store's own (ClassCanceled while
// ctx has not ended). It is the one test of when a FailMode answers instead
// of an error. An error of a call whose ctx has ended is the caller's (its
// client went away, or its deadline passed), never a fallback; any other
// error is the caller's mistake or a bug, answered as an error.
func Unavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return false // the caller's deadline, whose timer has not fired yet
	}
	switch ClassOf(err) {
	case ClassUnavailable, ClassCanceled:
		return true
	}
	return false
}

// GCRAFallback returns the result that m answers in place of a GCRA
// command (GCRAStore.GCRA) that the store could not decide: a fresh key's
// reply, Limited under FailClosed, with Fallback set.
func (m FailMode) GCRAFallback(p gcra.CommandParams) GCRAResult {
	_, r, _, _ := gcra.DecideCommand(0, 0, false, p)
	r.Limit, r.Limited = p.Limit, m != FailOpen
	return GCRAResult{Reply: r, Fallback: true}
}
