package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funnelrl/funnel/metrics"
)

func TestObserveRateLimit(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true, MaxRules: 4})
	m.ObserveRateLimit("mongo_cps.database_users", metrics.RateLimitCounts{TotalHits: 3, WithinLimit: 3, NearLimit: 1})
	m.ObserveRateLimit("mongo_cps.database_users", metrics.RateLimitCounts{TotalHits: 2, OverLimit: 2})
	m.ObserveRateLimit("api.user_alice.path_/a", metrics.RateLimitCounts{TotalHits: 1, OverLimit: 1, ShadowMode: 1})
	// Sanitized as envoy sanitizes its statistics names.
	m.ObserveRateLimit("api.remote_address_10.0.0.7.x:y|z.more", metrics.RateLimitCounts{TotalHits: 1, WithinLimit: 1})
	s := scrape(t, m)
	const one = `{domain="mongo_cps",key1="database_users"}`
	want(t, s, "ratelimit_service_rate_limit_total_hits"+one, "5")
	want(t, s, "ratelimit_service_rate_limit_within_limit"+one, "3")
	want(t, s, "ratelimit_service_rate_limit_near_limit"+one, "1")
	want(t, s, "ratelimit_service_rate_limit_over_limit"+one, "2")
	want(t, s, "ratelimit_service_rate_limit_shadow_mode"+one, "0")
	const two = `{domain="api",key1="user_alice",key2="path_/a"}`
	want(t, s, "ratelimit_service_rate_limit_over_limit"+two, "1")
	want(t, s, "ratelimit_service_rate_limit_shadow_mode"+two, "1")
	want(t, s, `ratelimit_service_rate_limit_total_hits{domain="api",key1="remote_address_10_0_0_7",key2="x_y_z"}`, "1")

	// Beyond MaxRules keys, one more series.
	for _, k := range []string{"d.a", "d.b", "d.c"} {
		m.ObserveRateLimit(k, metrics.RateLimitCounts{TotalHits: 1, WithinLimit: 1})
	}
	s = scrape(t, m)
	want(t, s, `ratelimit_service_rate_limit_total_hits{domain="d",key1="a"}`, "1")
	want(t, s, `ratelimit_service_rate_limit_total_hits{domain="_other",key1="_other"}`, "2")
	if _, ok := s[`ratelimit_service_rate_limit_total_hits{domain="d",key1="c"}`]; ok {
		t.Error("a key beyond the bound has a series")
	}
	n := 0
	for k := range s {
		if strings.HasPrefix(k, "ratelimit_service_rate_limit_total_hits{") {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d series of total_hits, want 5 (4 keys and the rest)", n)
	}
}

// Prometheus asks for OpenMetrics first: the names stay envoy's, without
// a _total suffix, so that dashboards written for envoy's find them.
func TestObserveRateLimitOpenMetrics(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	m.ObserveRateLimit("d.k_v", metrics.RateLimitCounts{TotalHits: 1, OverLimit: 1})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") ||
		!strings.Contains(string(b), "\nratelimit_service_rate_limit_over_limit{domain=\"d\",key1=\"k_v\"} 1.0\n") {
		t.Fatalf("%s\n%s", resp.Header.Get("Content-Type"), b)
	}
}

func TestObserveRateLimitNil(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveRateLimit("d.k", metrics.RateLimitCounts{TotalHits: 1})
}

func BenchmarkObserveRateLimit(b *testing.B) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	c := metrics.RateLimitCounts{TotalHits: 1, WithinLimit: 1}
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveRateLimit("api.user", c)
	}
}

// FuzzObserveRateLimit: whatever the key, the registry gathers, and every
// series has the labels domain, key1 and maybe key2.
func FuzzObserveRateLimit(f *testing.F) {
	for _, s := range []string{"d.k", "d.k_v.k2_v2.k3", "d", "", ".", "..", "d.remote_address_1.2.3.4", "a:b|c.d", "d.\xff\xfe", "_other"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
		m.ObserveRateLimit(key, metrics.RateLimitCounts{TotalHits: 2, OverLimit: 1})
		mfs, err := m.Registry().Gather()
		if err != nil {
			t.Fatalf("%q: %v", key, err)
		}
		n := 0
		for _, mf := range mfs {
			if !strings.HasPrefix(mf.GetName(), "ratelimit_service_rate_limit_") {
				continue
			}
			for _, s := range mf.Metric {
				n++
				names := ""
				for _, l := range s.Label {
					names += l.GetName() + ","
				}
				if names != "domain,key1," && names != "domain,key1,key2," {
					t.Fatalf("%q: labels %s", key, names)
				}
			}
		}
		if n != 5 {
			t.Fatalf("%q: %d series, want 5", key, n)
		}
	})
}
