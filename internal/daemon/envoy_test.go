package daemon_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/funnelrl/funnel/internal/config"
)

// envoyConfig is testConfig with rules of domain api: user, 2 a minute.
func envoyConfig(t *testing.T, rules string) config.Config {
	t.Helper()
	if rules == "" {
		rules = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Rules = path
	return cfg
}

// httpDo sends a request with an optional bearer token and returns the
// status and body of the answer.
func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// dialRLS connects to the daemon's rate-limit service.
func dialRLS(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func userRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
	}}}
}

// TestDaemonRLSOverHTTP: the HTTP listener serves envoyproxy/ratelimit's
// POST /json behind the credentials, on the same limits as gRPC, and its
// /healthcheck without them.
func TestDaemonRLSOverHTTP(t *testing.T) {
	t.Parallel()
	cfg := envoyConfig(t, "")
	cfg.RequirePass = "s3cret"
	d, _, stop := start(t, cfg)
	base := "http://" + d.HTTPAddr().String()
	body := `{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]}`
	if code, _ := httpDo(t, "POST", base+"/json", "", body); code != http.StatusUnauthorized {
		t.Fatalf("/json without credentials: %d", code)
	}
	if code, text := httpDo(t, "POST", base+"/json", "s3cret", body); code != 200 || !strings.Contains(text, `"overallCode":"OK"`) {
		t.Fatalf("/json: %d %s", code, text)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	if r, err := dialRLS(t, d.GRPCAddr().String()).ShouldRateLimit(ctx, userRequest("alice")); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC: %v %v", r, err)
	}
	if code, text := httpDo(t, "POST", base+"/json", "s3cret", body); code != http.StatusTooManyRequests || !strings.Contains(text, `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("/json over the limit: %d %s", code, text)
	}
	if code, text := httpDo(t, "GET", base+"/healthcheck", "", ""); code != 200 || text != "OK" {
		t.Fatalf("/healthcheck: %d %q", code, text)
	}
	// The HTTP API is still there, behind the credentials.
	if code, _ := httpDo(t, "GET", base+"/v1/bans", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/bans without credentials: %d", code)
	}
	if code, _ := httpDo(t, "GET", base+"/v1/bans", "s3cret", ""); code != 200 {
		t.Fatalf("/v1/bans: %d", code)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonRLSWithoutGRPC: without the rate-limit service there is no
// /json nor /healthcheck.
func TestDaemonRLSWithoutGRPC(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.GRPC = ""
	d, _, _ := start(t, cfg)
	base := "http://" + d.HTTPAddr().String()
	for _, path := range []string{"/json", "/healthcheck"} {
		if code, _ := httpDo(t, "POST", base+path, "", "{}"); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, code)
		}
	}
}

// TestDaemonRLSHeaders: --rls-headers sends the configured names, or the
// IETF fields.
func TestDaemonRLSHeaders(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mod  func(*config.Config)
		want string
	}{
		{func(*config.Config) {}, "RateLimit-Limit=2 RateLimit-Remaining=1 RateLimit-Reset="},
		{func(c *config.Config) {
			c.RLSHeaderLimit, c.RLSHeaderRemaining = "X-RateLimit-Limit", "X-RateLimit-Remaining"
		},
			"X-RateLimit-Limit=2 X-RateLimit-Remaining=1 RateLimit-Reset="},
		{func(c *config.Config) { c.RLSHeadersFormat = "ietf" }, `RateLimit-Policy="api.user";q=2;w=60 RateLimit="api.user";r=1;t=`},
	} {
		cfg := envoyConfig(t, "")
		cfg.RLSHeaders = true
		c.mod(&cfg)
		d, _, _ := start(t, cfg)
		r, err := dialRLS(t, d.GRPCAddr().String()).ShouldRateLimit(context.Background(), userRequest("bob"))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range r.ResponseHeadersToAdd {
			got = append(got, h.Key+"="+h.Value)
		}
		if s := strings.Join(got, " "); !strings.HasPrefix(s, c.want) {
			t.Errorf("headers %q, want %q…", s, c.want)
		}
	}
}

// TestDaemonRLSStatistics: after real gRPC (and /json) requests, /metrics
// has envoyproxy/ratelimit's statistics under the names of its Prometheus
// mapping, by rule, never by request value (but with detailed_metric).
func TestDaemonRLSStatistics(t *testing.T) {
	t.Parallel()
	cfg := envoyConfig(t, `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    detailed_metric: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	d, _, _ := start(t, cfg)
	client := dialRLS(t, d.GRPCAddr().String())
	ask := func(hits uint32, kv ...string) {
		t.Helper()
		req := &rlsv3.RateLimitRequest{Domain: "api", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}
		for i := 0; i < len(kv); i += 2 {
			req.Descriptors[0].Entries = append(req.Descriptors[0].Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	// user: 10 a minute for each user, near from 8.
	ask(7, "user", "alice") // 7 within
	ask(2, "user", "bob")   // 2 within (bob has a limit of his own)
	ask(3, "user", "alice") // 3 within, 2 near (alice's 9th and 10th)
	ask(2, "user", "alice") // 2 over
	// path under user: 1 a minute.
	ask(1, "user", "alice", "path", "/a")
	ask(1, "user", "carol", "path", "/b")
	// tenant: detailed, in shadow mode.
	ask(2, "tenant", "t1")
	base := "http://" + d.HTTPAddr().String()
	if code, _ := httpDo(t, "POST", base+"/json", "", `{"domain":"api","descriptors":[{"entries":[{"key":"tenant","value":"t1"}]}]}`); code != 200 {
		t.Fatalf("/json: %d", code)
	}
	code, body := httpDo(t, "GET", base+"/metrics", "", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits{domain="api",key1="user"} 14`,
		`ratelimit_service_rate_limit_within_limit{domain="api",key1="user"} 12`,
		`ratelimit_service_rate_limit_near_limit{domain="api",key1="user"} 2`,
		`ratelimit_service_rate_limit_over_limit{domain="api",key1="user"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="api",key1="user",key2="path"} 2`,
		`ratelimit_service_rate_limit_within_limit{domain="api",key1="user",key2="path"} 2`,
		// 2 hits of a limit of 1, refused (1 over, 1 near, as envoy counts
		// them); then 1, admitted, as Funnel charged nothing for them.
		`ratelimit_service_rate_limit_total_hits{domain="api",key1="tenant_t1"} 3`,
		`ratelimit_service_rate_limit_over_limit{domain="api",key1="tenant_t1"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="api",key1="tenant_t1"} 2`,
		`ratelimit_service_rate_limit_shadow_mode{domain="api",key1="tenant_t1"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="api",key1="tenant_t1"} 1`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, never := range []string{"alice", "bob", "carol", `"/a"`} {
		if strings.Contains(body, never) {
			t.Errorf("/metrics has a request value, %s", never)
		}
	}
}

// TestDaemonChargeOverLimit: --charge-over-limit charges every hit, the
// hits over the limit too, as envoy's service does by default; without it
// only what fits is charged.
func TestDaemonChargeOverLimit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		charge bool
		want   string
	}{{false, "OK 2 OVER_LIMIT 2 OK 1"}, {true, "OK 2 OVER_LIMIT 0 OVER_LIMIT 0"}} {
		cfg := envoyConfig(t, "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 4}\n")
		cfg.ChargeOverLimit = c.charge
		d, _, _ := start(t, cfg)
		client := dialRLS(t, d.GRPCAddr().String())
		var got []string
		for _, hits := range []uint32{2, 3, 1} {
			req := userRequest("bob")
			req.HitsAddend = hits
			r, err := client.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.OverallCode.String(), strconv.Itoa(int(r.Statuses[0].LimitRemaining)))
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("--charge-over-limit=%v: %s, want %s", c.charge, s, c.want)
		}
	}
}
