package rls

import (
	"testing"

	"github.com/funnelrl/funnel"
)

// TestCountsOf follows envoy's base limiter: a limit of 10, near from 8.
func TestCountsOf(t *testing.T) {
	for _, c := range []struct {
		name   string
		r      funnel.Result
		limit  int64
		hits   int64
		shadow bool
		want   Counts
	}{
		{"within", funnel.Result{Allowed: true, Remaining: 5}, 10, 1, false, Counts{TotalHits: 1, WithinLimit: 1}},
		{"up to the threshold", funnel.Result{Allowed: true, Remaining: 2}, 10, 3, false, Counts{TotalHits: 3, WithinLimit: 3}},
		{"across the threshold", funnel.Result{Allowed: true, Remaining: 1}, 10, 3, false, Counts{TotalHits: 3, WithinLimit: 3, NearLimit: 1}},
		{"all near", funnel.Result{Allowed: true, Remaining: 0}, 10, 2, false, Counts{TotalHits: 2, WithinLimit: 2, NearLimit: 2}},
		{"over from full", funnel.Result{Remaining: 0}, 10, 4, false, Counts{TotalHits: 4, OverLimit: 4}},
		{"partly over", funnel.Result{Remaining: 3}, 10, 5, false, Counts{TotalHits: 5, OverLimit: 2, NearLimit: 2}},
		{"partly over, below near", funnel.Result{Remaining: 5}, 10, 7, false, Counts{TotalHits: 7, OverLimit: 2, NearLimit: 2}},
		{"shadow", funnel.Result{Remaining: 1}, 10, 3, true, Counts{TotalHits: 3, OverLimit: 2, NearLimit: 1, ShadowMode: 2}},
		{"the result's limit first", funnel.Result{Allowed: true, Limit: 5, Remaining: 0}, 10, 1, false, Counts{TotalHits: 1, WithinLimit: 1, NearLimit: 1}},
		{"refuses everything", funnel.Result{}, 0, 3, false, Counts{TotalHits: 3, OverLimit: 3}},
		{"fail open", funnel.Result{Allowed: true, Fallback: true}, 10, 2, false, Counts{TotalHits: 2, WithinLimit: 2}},
		{"fail closed", funnel.Result{Fallback: true}, 10, 2, false, Counts{TotalHits: 2, OverLimit: 2}},
		{"zero hits", funnel.Result{Allowed: true, Remaining: 0}, 10, 0, false, Counts{}},
	} {
		if got := countsOf(c.r, c.limit, c.hits, DefaultNearLimitRatio, c.shadow); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
