package rls_test

import (
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/funnelrl/funnel/rls"
)

// headerText writes headers as "Key=Value" separated by " | ".
func headerText(hs []*core.HeaderValue) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.Key+"="+h.Value)
	}
	return strings.Join(s, " | ")
}

func TestDefaultHeadersAreUpstreams(t *testing.T) {
	e := extEnv(t, rls.Options{ResponseHeaders: rls.DefaultHeaders()})
	e.clock.Add(15 * time.Second)
	r := e.ask(t, "ext", desc("a", "5"), desc("b", "5"))
	if got, want := headerText(r.ResponseHeadersToAdd), "RateLimit-Limit=3 | RateLimit-Remaining=2 | RateLimit-Reset=45"; got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
	// Each name is configurable, as LIMIT_*_HEADER.
	e = extEnv(t, rls.Options{ResponseHeaders: &rls.Headers{Limit: "L", Remaining: "R", Reset: "S"}})
	r = e.ask(t, "ext", desc("b", "1"))
	if got, want := headerText(r.ResponseHeadersToAdd), "L=3 | R=2 | S=60"; got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
}

func TestIETFHeaders(t *testing.T) {
	e := extEnv(t, rls.Options{ResponseHeaders: rls.IETFHeaders(), RequestHeaders: rls.IETFHeaders()})
	e.clock.Add(15 * time.Second)
	// The fixed window of b: 3 a minute, 45 s to the end of the window.
	r := e.ask(t, "ext", desc("a", "5"), desc("b", "5"))
	want := `RateLimit-Policy="ext.b";q=3;w=60 | RateLimit="ext.b";r=2;t=45`
	if got := headerText(r.ResponseHeadersToAdd); got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
	if got := headerText(r.RequestHeadersToAdd); got != want {
		t.Fatalf("request headers %q, want %q", got, want)
	}
	// A funnel: 10 per 10 s, burst 4, so 5 at once and 5 s to refill; once
	// refused, t is the wait until the next request passes (1 s).
	for range 5 {
		e.ask(t, "ext", desc("gcra", "1"))
	}
	r = e.ask(t, "ext", desc("gcra", "1"))
	want = `RateLimit-Policy="ext.gcra";q=5;w=5 | RateLimit="ext.gcra";r=0;t=1`
	if got := headerText(r.ResponseHeadersToAdd); r.OverallCode != OVER || got != want {
		t.Fatalf("%v: headers %q, want %q", r.OverallCode, got, want)
	}
	// A rule that refuses everything.
	r = e.ask(t, "ext", desc("blocked", "1"))
	want = `RateLimit-Policy="ext.blocked";q=0;w=60 | RateLimit="ext.blocked";r=0;t=45`
	if got := headerText(r.ResponseHeadersToAdd); got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
}
