package funnel

import (
	"context"

	"github.com/funnelrl/funnel/gcra"
)

// Observer is told of the decisions of a Limiter that are not plain
// admissions: a take (AllowN, AllowChecked, Do, AllowAll, Acquire, …)
// whose result is refused, admitted with a Delay, or a fallback. Plain
// admissions are not observed, so that an observer costs the admitted
// path one test of its result; count them where a per-request cost is
// paid already (an edge's metrics). Errors, peeks that are admitted,
// refunds and releases are not observed either.
//
// Observe is called after the decision, on the caller's goroutine, with
// the decision's key, its checked limit (for a funnel decided through the
// store's FunnelTaker, the Limit and its GCRA parameters only) and its
// result. It must be safe for concurrent use, must not block, and must not
// keep key, which may alias a buffer the caller reuses.
type Observer interface {
	Observe(ctx context.Context, key string, c Checked, r Result)
}

// ObservingStore is implemented by a Store that wraps another only to
// observe its decisions (the console's). New builds a Limiter that decides
// on the wrapped store, through its FunnelTaker when it has one, and tells
// the Observer itself: the store's fast path stays in use. Callers of the
// wrapper's own methods (Do, a GCRA command) are observed by the wrapper.
type ObservingStore interface {
	Store
	// Observed returns the wrapped store and the observer of its
	// decisions.
	Observed() (Store, Observer)
}

// WithObserver returns a Limiter over l's store that tells o of its
// decisions that are not plain admissions (see Observer), besides the
// observers l has already. A nil o returns l.
func (l *Limiter) WithObserver(o Observer) *Limiter {
	if o == nil {
		return l
	}
	c := *l
	if c.obs != nil {
		o = observers{c.obs, o}
	}
	c.obs = o
	return &c
}

// observers tells two observers, in turn.
type observers [2]Observer

func (os observers) Observe(ctx context.Context, key string, c Checked, r Result) {
	os[0].Observe(ctx, key, c, r)
	os[1].Observe(ctx, key, c, r)
}

// notable reports whether an Observer is told of r: a refusal, a delayed
// admission or a fallback.
func notable(r *Result) bool { return !r.Allowed || r.Fallback || r.Delay > 0 }

// observeFunnel tells the observer of a funnel decided through the store's
// FunnelTaker, out of the admitted path.
//
//go:noinline
func (l *Limiter) observeFunnel(ctx context.Context, key string, limit *Limit, p *gcra.Params, r *Result) {
	l.obs.Observe(ctx, key, Checked{Limit: *limit, GCRA: *p}, *r)
}

// observeOps tells the observer of the notable results of a call of Do.
func (l *Limiter) observeOps(ctx context.Context, ops []Op, res []Result) {
	for i := range ops {
		if ops[i].Kind == OpTake && notable(&res[i]) {
			l.obs.Observe(ctx, ops[i].Key, ops[i].Limit, res[i])
		}
	}
}
