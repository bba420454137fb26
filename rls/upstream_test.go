package rls_test

import (
	"fmt"
	"strconv"
	"testing"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/funnelrl/funnel/rls"
)

// dstatus is what envoy's integration tests check of a descriptor status.
type dstatus struct {
	code      rlsv3.RateLimitResponse_Code
	count     uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	remaining uint32
}

func (e *env) expectStatuses(t *testing.T, overall rlsv3.RateLimitResponse_Code, domain string, kv [][]string, want ...dstatus) {
	t.Helper()
	r := e.ask(t, domain, descs(kv)...)
	got := fmt.Sprint(r.OverallCode)
	for _, st := range r.Statuses {
		got += fmt.Sprintf(" %v %d/%v %d", st.Code, st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.LimitRemaining)
	}
	w := fmt.Sprint(overall)
	for _, st := range want {
		w += fmt.Sprintf(" %v %d/%v %d", st.code, st.count, st.unit, st.remaining)
	}
	if got != w {
		t.Fatalf("%s %v: %s\nwant %s", domain, kv, got, w)
	}
}

func descs(kv [][]string) []*ratelimit.RateLimitDescriptor {
	var ds []*ratelimit.RateLimitDescriptor
	for _, p := range kv {
		ds = append(ds, desc(p...))
	}
	return ds
}

// The decisions of envoyproxy/ratelimit's integration tests
// (test/integration/integration_test.go: testBasicBaseConfig,
// testConfigReload, testShareThreshold) under their rules files.
func TestUpstreamIntegrationDecisions(t *testing.T) {
	e := start(t, nil, loadRules(t, "../rules/testdata/upstream/integration"), rls.Options{})
	const (
		sec  = rlsv3.RateLimitResponse_RateLimit_SECOND
		min  = rlsv3.RateLimitResponse_RateLimit_MINUTE
		hour = rlsv3.RateLimitResponse_RateLimit_HOUR
	)
	// An unknown domain is not limited.
	e.expectStatuses(t, OK, "foo", [][]string{{"hello", "world"}}, dstatus{code: OK})
	e.expectStatuses(t, OK, "basic", [][]string{{"key1", "foo"}}, dstatus{OK, 50, sec, 49})
	// Over a minute limit.
	for i := range 25 {
		st := dstatus{OK, 20, min, uint32(20 - (i + 1))}
		if i >= 20 {
			st.code, st.remaining = OVER, 0
		}
		e.expectStatuses(t, st.code, "another", [][]string{{"key2", "r1"}}, st)
	}
	// Two keys of one domain: once key3 is over, key2 is not charged, as
	// upstream's integration tests expect with
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (Funnel never charges a
	// refused request).
	for i := range 15 {
		st2 := dstatus{OK, 20, min, uint32(20 - (i + 1))}
		st3 := dstatus{OK, 10, hour, uint32(10 - (i + 1))}
		overall := OK
		if i >= 10 {
			overall, st3.code, st3.remaining, st2.remaining = OVER, OVER, 0, 10
		}
		e.expectStatuses(t, overall, "another", [][]string{{"key2", "r2"}, {"key3", "r2"}}, st2, st3)
	}
	// The rules that its reload test adds.
	e.expectStatuses(t, OK, "reload", [][]string{{"key1", "foo"}}, dstatus{OK, 50, sec, 49})
	// share_threshold: files/* shares one limit among its values.
	for i := range 10 {
		e.expectStatuses(t, OK, "share-threshold-test", [][]string{{"files", "files/a.pdf"}}, dstatus{OK, 10, hour, uint32(9 - i)})
	}
	e.expectStatuses(t, OVER, "share-threshold-test", [][]string{{"files", "files/b.csv"}}, dstatus{OVER, 10, hour, 0})
	for i := range 10 {
		v := "files_no_share/" + strconv.Itoa(i)
		e.expectStatuses(t, OK, "share-threshold-test", [][]string{{"files_no_share", v}}, dstatus{OK, 10, hour, 9})
	}
}
