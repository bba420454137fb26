package rls_test

import (
	"sync"
	"testing"

	"github.com/funnelrl/funnel/rls"
)

// TestCount: each decided descriptor that has a limit is counted, under its
// rule's statistics key, over gRPC.
func TestCount(t *testing.T) {
	var mu sync.Mutex
	got := map[string]rls.Counts{}
	e := extEnv(t, rls.Options{Count: func(metric string, c rls.Counts) {
		mu.Lock()
		defer mu.Unlock()
		g := got[metric]
		g.TotalHits += c.TotalHits
		g.OverLimit += c.OverLimit
		g.NearLimit += c.NearLimit
		g.WithinLimit += c.WithinLimit
		g.ShadowMode += c.ShadowMode
		got[metric] = g
	}})
	// b: 3 a minute, near from 2.
	e.expectCodes(t, 3, "OK OK", "ext", desc("b", "1"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "ext", desc("b", "1"))
	// shadow: 1 a minute, in shadow mode; blocked refuses everything.
	e.expectCodes(t, 2, "OK OK", "ext", desc("shadow", "1"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "ext", desc("blocked", "1"))
	// No rule, no count.
	e.expectCodes(t, 1, "OK OK", "ext", desc("nothing", "1"))
	e.expectCodes(t, 1, "OK OK", "unknown", desc("b", "1"))
	mu.Lock()
	defer mu.Unlock()
	for key, want := range map[string]rls.Counts{
		"ext.b":       {TotalHits: 4, WithinLimit: 3, NearLimit: 1, OverLimit: 1},
		"ext.shadow":  {TotalHits: 2, WithinLimit: 1, NearLimit: 1, OverLimit: 1, ShadowMode: 1},
		"ext.blocked": {TotalHits: 1, OverLimit: 1},
	} {
		if got[key] != want {
			t.Errorf("%s: %+v, want %+v", key, got[key], want)
		}
	}
	if len(got) != 3 {
		t.Errorf("counted %v", got)
	}
}
