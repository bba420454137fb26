package daemon_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/funnelrl/funnel/internal/eventually"
)

// TestDaemonGRPC: Envoy's rate-limit service answers from the rules file,
// picks up a change of the file, and counts decisions and reloads in
// /metrics.
func TestDaemonGRPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	write := func(n int) {
		t.Helper()
		body := "domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: " + string(rune('0'+n)) + "\n"
		tmp := rules + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, rules); err != nil {
			t.Fatal(err)
		}
	}
	write(2)
	cfg := testConfig()
	cfg.Rules = rules
	d, logs, stop := start(t, cfg)
	// The start says which rules are in force.
	if l := logs.String(); !strings.Contains(l, "rules loaded") || !strings.Contains(l, "domains=1 rules=1") {
		t.Errorf("no log line of the rules loaded at start:\n%s", l)
	}
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(user string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.OverallCode
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask("alice"); got != want {
			t.Fatalf("request %d: %v, want %v", i, got, want)
		}
	}
	// Raise the limit to 3 a minute: alice's next request passes once the
	// new rules are in force (the key, and so the window's count, is the
	// same). Refused requests charge nothing, so polling is harmless.
	write(3)
	eventually.True(t, "the rules reloaded", func() bool { return ask("alice") == rlsv3.RateLimitResponse_OK })
	res, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{`funnel_rules_reloads_total{result="success"}`, `rule="api.user"`, `outcome="refused"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
