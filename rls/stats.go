package rls

import (
	"math"

	"github.com/funnelrl/funnel"
)

// DefaultNearLimitRatio is envoy's default NEAR_LIMIT_RATIO.
const DefaultNearLimitRatio = 0.8

// Counts are the statistics of one descriptor's decision, in hits (the
// request's hits_addend), as envoyproxy/ratelimit counts them under its
// rule's statistics key:
//
//   - TotalHits: every hit;
//   - OverLimit: the hits past the limit, when the descriptor refuses (in
//     shadow mode too);
//   - NearLimit: the hits between the near-limit threshold
//     (floor(limit × NearLimitRatio)) and the limit;
//   - WithinLimit: every hit of a descriptor that admits;
//   - ShadowMode: the hits past the limit of a rule in shadow mode.
//
// A request of n hits that a descriptor refuses with r of its limit l left
// counts as envoy counts it, although Funnel charges nothing: n over the
// limit when r is 0, else n - r over and the hits from the threshold up to
// l near it. The limit is the result's (Burst+1 for the funnel), else
// requests_per_unit. The hits of a rule with charge_over_limit that leave
// its key over its limit are charged, and all counted over the limit: the
// charge's result does not say what was left before it, so the hits that
// still fitted are not told apart (upstream counts them near the limit).
type Counts struct {
	TotalHits   uint64
	OverLimit   uint64
	NearLimit   uint64
	WithinLimit uint64
	ShadowMode  uint64
}

// countsOf returns the counts of a decision of hits whose result is r,
// under a limit of limit requests (0: r.Limit), the near-limit ratio ratio,
// for a rule in shadow mode or not.
func countsOf(r funnel.Result, limit, hits int64, ratio float64, shadow bool) Counts {
	n := uint64(max(hits, 0))
	c := Counts{TotalHits: n}
	if r.Limit > 0 {
		limit = r.Limit
	}
	if r.Fallback { // the store said nothing of how full the limit is
		if r.Allowed {
			c.WithinLimit = n
		} else {
			c.OverLimit = n
		}
		return c
	}
	l := uint64(max(limit, 0))
	near := uint64(math.Floor(float64(l) * ratio))
	left := uint64(min(max(r.Remaining, 0), int64(l)))
	if r.Allowed {
		// Charged: left is what remains after the hits.
		after := l - left
		before := after - min(n, after)
		c.WithinLimit = n
		if after > near {
			c.NearLimit = after - max(near, before)
		}
		return c
	}
	// Refused: left is what remained before, and still does.
	before := l - left
	if before >= l || n <= left {
		c.OverLimit = n
	} else {
		c.OverLimit = n - left
		c.NearLimit = l - max(near, before)
	}
	if shadow {
		c.ShadowMode = c.OverLimit
	}
	return c
}

// count reports the counts of item it, decided with result r, to
// Options.Count.
func (s *Server) count(it *item, r funnel.Result) {
	if s.opts.Count == nil || it.rule == nil {
		return
	}
	s.opts.Count(it.metric, countsOf(r, int64(it.rule.RequestsPerUnit), it.hits, s.opts.NearLimitRatio, it.rule.ShadowMode))
}
