package rules

import (
	"fmt"
	"strings"
	"testing"
)

// largeRules writes a domain of n descriptors, each with five nested
// descriptors of every form a file takes: plain units, periods, other
// algorithms, calendars, metadata, wildcards and replaces.
func largeRules(n int) string {
	var b strings.Builder
	b.WriteString("domain: large\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, `  - key: tenant
    value: t%d
    metadata: {tier: gold, weights: [0.5, 2], nested: {on: true}}
    rate_limit: {unit: minute, requests_per_unit: %d, name: tenant%d}
    descriptors:
      - key: user
        rate_limit: {algorithm: gcra, period: 1m30s, requests_per_unit: 30, burst: 9, ban: 1h}
      - key: path
        value: /api/%d/*
        share_threshold: true
        rate_limit: {algorithm: leaky_bucket, period: 1s, requests_per_unit: 10, burst: 20, delay: nodelay}
      - key: day
        shadow_mode: true
        rate_limit: {calendar: day, time_zone: UTC, requests_per_unit: 1000}
      - key: free
        rate_limit:
          unlimited: true
      - key: gold
        quota_mode: true
        rate_limit:
          unit: hour
          requests_per_unit: 100
          replaces: [{name: tenant%d}]
`, i, i+1, i, i, i)
	}
	return b.String()
}

// BenchmarkParseLarge loads a file of 12,000 descriptors (2,000 tenants
// with five descriptors each).
func BenchmarkParseLarge(b *testing.B) {
	in := largeRules(2000)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(strings.NewReader(in), "large.yaml", Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatch matches a two-entry descriptor of envoy's examples, the
// work of every request the rate-limit service decides.
func BenchmarkMatch(b *testing.B) {
	r, err := Load("testdata/envoy", Options{})
	if err != nil {
		b.Fatal(err)
	}
	es := []Entry{{"message_type", "marketing"}, {"to_number", "2061111111"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := r.Match("messaging", es); !ok {
			b.Fatal("no match")
		}
	}
}
