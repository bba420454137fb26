package console

import (
	"sync"
	"sync/atomic"

	"github.com/funnelrl/funnel"
)

// Outcomes of a decision, as the live view draws them.
const (
	outAllowed = iota
	outDelayed // admitted with a delay: counted among the allowed too
	outRefused
	outBanned
	outFallback
	outError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"allowed", "delayed", "refused", "banned", "fallback", "error"}

// outcomeOf returns the outcomes r counts under (a delayed admission
// counts as allowed and delayed), -1 for none.
func outcomeOf(r funnel.Result, err error) (int, int) {
	switch {
	case err != nil:
		return outError, -1
	case r.Fallback:
		return outFallback, -1
	case r.Allowed && r.Delay > 0:
		return outAllowed, outDelayed
	case r.Allowed:
		return outAllowed, -1
	case r.Banned:
		return outBanned, -1
	}
	return outRefused, -1
}

// ruleKey names the decisions of one rule through one edge.
type ruleKey struct{ edge, rule string }

// Decisions counts, for the live view, the decisions of each rule through
// each edge, by outcome: every decision, admitted ones included, told by
// the edge that decides under rules (the rate-limit service's Observe,
// over gRPC and over HTTP's /json), where a request costs microseconds
// already. At most MaxSeries rules are counted by name; the decisions of
// further ones are counted under the rule "_other". It is safe for
// concurrent use; a nil *Decisions counts nothing.
type Decisions struct {
	m sync.Map // ruleKey → *[numOutcomes]atomic.Uint64
	n atomic.Int64
}

// Observe counts one decision of rule through edge: its result, or err.
func (d *Decisions) Observe(edge, rule string, r funnel.Result, err error) {
	if d == nil {
		return
	}
	a, b := outcomeOf(r, err)
	c := d.counters(edge, rule)
	c[a].Add(1)
	if b >= 0 {
		c[b].Add(1)
	}
}

// counters returns the counters of rule through edge.
func (d *Decisions) counters(edge, rule string) *[numOutcomes]atomic.Uint64 {
	k := ruleKey{edge, rule}
	if c, ok := d.m.Load(k); ok {
		return c.(*[numOutcomes]atomic.Uint64)
	}
	if d.n.Add(1) > MaxSeries {
		d.n.Add(-1)
		k.rule = "_other"
		if c, ok := d.m.Load(k); ok {
			return c.(*[numOutcomes]atomic.Uint64)
		}
	}
	c, loaded := d.m.LoadOrStore(k, new([numOutcomes]atomic.Uint64))
	if loaded && k.rule != "_other" {
		d.n.Add(-1) // another goroutine made it first
	}
	return c.(*[numOutcomes]atomic.Uint64)
}

// each calls f with every count kept.
func (d *Decisions) each(f func(k seriesKey, n uint64)) {
	if d == nil {
		return
	}
	d.m.Range(func(key, value any) bool {
		k, c := key.(ruleKey), value.(*[numOutcomes]atomic.Uint64)
		for o := range c {
			if n := c[o].Load(); n > 0 {
				f(seriesKey{k.edge, k.rule, outcomeNames[o]}, n)
			}
		}
		return true
	})
}
