package metrics

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// RateLimitCounts are the statistics of one decision of a rule of Envoy's
// rate-limit service, in hits, as envoyproxy/ratelimit counts them (see
// rls.Counts, whose fields these are).
type RateLimitCounts struct {
	TotalHits   uint64
	OverLimit   uint64
	NearLimit   uint64
	WithinLimit uint64
	ShadowMode  uint64
}

// The names of the rate-limit statistics, as envoyproxy/ratelimit's
// Prometheus mapping names them, in the order of RateLimitCounts' fields.
var rateLimitNames = [...]string{
	"ratelimit_service_rate_limit_total_hits",
	"ratelimit_service_rate_limit_over_limit",
	"ratelimit_service_rate_limit_near_limit",
	"ratelimit_service_rate_limit_within_limit",
	"ratelimit_service_rate_limit_shadow_mode",
}

var rateLimitHelp = [...]string{
	"Hits of the rate-limit service's descriptors, by rule (envoyproxy/ratelimit's total_hits).",
	"Hits past the limit, by rule, in shadow mode too (envoyproxy/ratelimit's over_limit).",
	"Hits between the near-limit ratio of the limit and the limit, by rule (envoyproxy/ratelimit's near_limit).",
	"Hits of descriptors that admitted them, by rule (envoyproxy/ratelimit's within_limit).",
	"Hits past the limit of rules in shadow mode, by rule (envoyproxy/ratelimit's shadow_mode).",
}

// rateLimitSeries are the counters of one statistics key.
type rateLimitSeries struct {
	labels []string // domain, key1[, key2]
	counts [len(rateLimitNames)]atomic.Uint64
}

// rateLimitCollector collects the rate-limit statistics. Their label
// names differ from key to key ({domain,key1} or {domain,key1,key2}, as
// envoy's mapping makes them), so it describes nothing: it is an unchecked
// collector.
type rateLimitCollector struct {
	max    int
	series sync.Map // statistics key -> *rateLimitSeries
	mu     sync.Mutex
	n      int                                      // distinct series, under mu
	descs  [2][len(rateLimitNames)]*prometheus.Desc // without and with key2
}

func newRateLimitCollector(max int) *rateLimitCollector {
	c := &rateLimitCollector{max: max}
	for i, name := range rateLimitNames {
		c.descs[0][i] = prometheus.NewDesc(name, rateLimitHelp[i], []string{"domain", "key1"}, nil)
		c.descs[1][i] = prometheus.NewDesc(name, rateLimitHelp[i], []string{"domain", "key1", "key2"}, nil)
	}
	return c
}

// Describe describes nothing: see rateLimitCollector.
func (c *rateLimitCollector) Describe(chan<- *prometheus.Desc) {}

// Collect sends the five counters of every key seen.
func (c *rateLimitCollector) Collect(ch chan<- prometheus.Metric) {
	c.series.Range(func(_, v any) bool {
		s := v.(*rateLimitSeries)
		descs := &c.descs[len(s.labels)-2]
		for i := range s.counts {
			ch <- prometheus.MustNewConstMetric(descs[i], prometheus.CounterValue, float64(s.counts[i].Load()), s.labels...)
		}
		return true
	})
}

// get returns the series of key, creating it up to the bound; beyond, the
// series of domain and key1 OtherRule.
func (c *rateLimitCollector) get(key string) *rateLimitSeries {
	if s, ok := c.series.Load(key); ok {
		return s.(*rateLimitSeries)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.series.Load(key); ok {
		return s.(*rateLimitSeries)
	}
	if c.n >= c.max {
		key = OtherRule
		if s, ok := c.series.Load(key); ok {
			return s.(*rateLimitSeries)
		}
	}
	s := &rateLimitSeries{labels: statLabels(key)}
	c.series.Store(key, s)
	c.n++
	return s
}

// ipv4 finds the IPv4 addresses of a statistics key, as envoy does.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statLabels returns the labels of statistics key as envoy's statsd
// exporter mapping gives them: the key made valid UTF-8, sanitized as envoy
// sanitizes its statistics names (':' and '|' become '_', and so do the dots of an IPv4
// address), then split on its dots: domain, key1 and, when there are more
// parts, key2 (the rest is dropped). OtherRule is {domain,key1} "_other".
func statLabels(key string) []string {
	if key == OtherRule {
		return []string{OtherRule, OtherRule}
	}
	// Label values must be UTF-8; keys of the rules and of gRPC requests
	// are, but a bad one must not break every scrape.
	key = strings.ToValidUTF8(key, "\uFFFD")
	key = strings.NewReplacer(":", "_", "|", "_").Replace(key)
	key = ipv4.ReplaceAllStringFunc(key, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
	parts := strings.SplitN(key, ".", 4)
	switch len(parts) {
	case 1:
		return []string{parts[0], ""}
	case 2:
		return parts
	}
	return parts[:3]
}

// ObserveRateLimit counts one decision of a rule of Envoy's rate-limit
// service under its statistics key (rules.Match.Metric, "domain.key_value…"
// as envoyproxy/ratelimit names it) as the counters that envoy's
// Prometheus mapping exposes: ratelimit_service_rate_limit_total_hits,
// _over_limit, _near_limit, _within_limit and _shadow_mode, labelled
// domain, key1 and, for keys of more than one level, key2. The key must
// come from the rules (detailed_metric and value_to_metric put request
// values in it, as the user chose): beyond Options.MaxRules distinct keys,
// decisions are counted under domain and key1 OtherRule.
func (m *Metrics) ObserveRateLimit(key string, c RateLimitCounts) {
	if m == nil {
		return
	}
	s := m.rateLimits.get(key)
	for i, v := range [...]uint64{c.TotalHits, c.OverLimit, c.NearLimit, c.WithinLimit, c.ShadowMode} {
		if v != 0 {
			s.counts[i].Add(v)
		}
	}
}
