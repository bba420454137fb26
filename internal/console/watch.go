package console

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
)

// Watch returns a store that passes every call to s and records each
// refused decision (every refusal, banned or not, that is not a fallback)
// in top under edge, with its key and limit, and counts the decisions
// admitted with a delay (see Top.Delayed). It is a funnel.ObservingStore:
// a Limiter built over it (funnel.New) decides on s itself, through s's
// funnel.FunnelTaker when s has one, and calls Observe only for the
// decisions that are not plain admissions, so that an admitted decision
// costs one test of its result. Its own Do and GCRA (for callers that use
// the store without a Limiter, such as the RESP server's GCRA command)
// record the same way. It forwards every optional interface of s that
// the daemon's edges use but FunnelTaker: funnel.GCRAStore,
// funnel.Grouper, NonBlocking, Keys and Evictions. With a nil top it
// returns s.
func Watch(s funnel.Store, top *Top, edge string) funnel.Store {
	if top == nil {
		return s
	}
	return &Watched{inner: s, top: top, edge: edge, delayed: top.delayCounter(edge)}
}

// WatchRefusals is Watch for an edge whose decisions are counted by rule
// (Decisions), delayed ones included: it records refusals in top and
// counts nothing else.
func WatchRefusals(s funnel.Store, top *Top, edge string) funnel.Store {
	if top == nil {
		return s
	}
	return &Watched{inner: s, top: top, edge: edge}
}

// Watched is a funnel.Store that records the refusals of the store it
// wraps in a Top. Build one with Watch.
type Watched struct {
	inner   funnel.Store
	top     *Top
	edge    string
	delayed *atomic.Uint64 // admitted with a delay; nil: not counted here
}

var (
	_ funnel.ObservingStore = (*Watched)(nil)
	_ funnel.GCRAStore      = (*Watched)(nil)
	_ funnel.Observer       = (*Watched)(nil)
)

// ruleOf returns the sketch's description of a checked limit: a funnel by
// its parameters, whichever path decided it, and no time zone pointer.
func ruleOf(c *funnel.Checked) funnel.Limit {
	if c.Algorithm == funnel.GCRA {
		return funnelRule(c.GCRA, c.Ban)
	}
	l := c.Limit
	l.Location = nil
	return l
}

// funnelRule describes a funnel by its emission interval and burst.
func funnelRule(p gcra.Params, ban time.Duration) funnel.Limit {
	return funnel.Limit{Algorithm: funnel.GCRA, Count: 1, Period: time.Duration(p.Interval), Burst: p.Burst, Ban: ban}
}

// Do calls the wrapped store's Do and records its refused takes.
func (w *Watched) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	err := w.inner.Do(ctx, ops, res)
	if err != nil {
		return err
	}
	for i := range ops {
		r := &res[i]
		switch {
		case ops[i].Kind != funnel.OpTake || r.Fallback:
		case !r.Allowed:
			w.top.Record(w.edge, ruleOf(&ops[i].Limit), ops[i].Key)
		case r.Delay > 0 && w.delayed != nil:
			w.delayed.Add(1)
		}
	}
	return nil
}

// Reset calls the wrapped store's Reset.
func (w *Watched) Reset(ctx context.Context, key string) (bool, error) {
	return w.inner.Reset(ctx, key)
}

// TTL calls the wrapped store's TTL.
func (w *Watched) TTL(ctx context.Context, key string) (time.Duration, bool, error) {
	return w.inner.TTL(ctx, key)
}

// Bans calls the wrapped store's Bans.
func (w *Watched) Bans(ctx context.Context) ([]funnel.Ban, error) { return w.inner.Bans(ctx) }

// Unban calls the wrapped store's Unban.
func (w *Watched) Unban(ctx context.Context, key string) (bool, error) {
	return w.inner.Unban(ctx, key)
}

// GCRA calls the wrapped store's GCRA command (funnel.ForwardGCRA) and
// records a refusal under the command's funnel.
func (w *Watched) GCRA(ctx context.Context, key string, p gcra.CommandParams) (funnel.GCRAResult, error) {
	r, err := funnel.ForwardGCRA(ctx, w.inner, key, p)
	if err == nil && r.Reply.Limited && !r.Fallback {
		// The command's interval is in microseconds.
		w.top.Record(w.edge, funnel.Limit{Algorithm: funnel.GCRA, Count: 1, Period: time.Duration(p.Interval) * time.Microsecond, Burst: p.Limit - 1}, key)
	}
	return r, err
}

// NonBlocking reports whether the wrapped store says that its calls never
// wait; recording a refusal does not wait.
func (w *Watched) NonBlocking() bool { return funnel.NonBlockingOf(w.inner) }

// Group returns the wrapped store's group of key (funnel.Grouper).
func (w *Watched) Group(key string) int { return funnel.GroupOf(w.inner, key) }

// Keys returns the keys the wrapped store holds, when it counts them
// (funnel.KeyCounter).
func (w *Watched) Keys() (int, bool) { return funnel.KeysOf(w.inner) }

// Evictions returns the keys the wrapped store evicted, when it evicts
// (funnel.EvictionCounter).
func (w *Watched) Evictions() uint64 { return funnel.EvictionsOf(w.inner) }

// Unwrap returns the wrapped store.
func (w *Watched) Unwrap() funnel.Store { return w.inner }

// Observed returns the wrapped store and w, its observer
// (funnel.ObservingStore).
func (w *Watched) Observed() (funnel.Store, funnel.Observer) { return w.inner, w }

// Observe records a refusal that is not a fallback (while sampling, one
// in SampleRate, chosen by the result's times) and counts a delayed
// admission (funnel.Observer).
func (w *Watched) Observe(_ context.Context, key string, c funnel.Checked, r funnel.Result) {
	switch {
	case r.Fallback:
	case !r.Allowed:
		// The memory store's times are in nanoseconds of a clock that
		// moves between two calls: their low bits choose the samples,
		// for less than a random number costs.
		if wt := w.top.weight(uint64(r.ResetAfter) ^ uint64(r.RetryAfter)<<1); wt > 0 {
			w.top.record(w.edge, ruleOf(&c), key, wt)
		}
	case r.Delay > 0 && w.delayed != nil:
		w.delayed.Add(1)
	}
}
