package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestDaemonQuotaModeAndMetadata: quota_mode and rls_dynamic_metadata
// reach Envoy's rate-limit service.
func TestDaemonQuotaModeAndMetadata(t *testing.T) {
	t.Parallel()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	body := `domain: api
descriptors:
  - key: a
    metadata: {from: a}
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    metadata: {from: b}
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	if err := os.WriteFile(rules, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Rules, cfg.QuotaMode, cfg.RLSDynamicMetadata = rules, true, true
	d, _, stop := start(t, cfg)
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(a, b string) (rlsv3.RateLimitResponse_Code, string) {
		t.Helper()
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
			Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "a", Value: a}}},
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "b", Value: b}}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.OverallCode, res.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["from"].GetStringValue()
	}
	for i, want := range []struct {
		a, b string
		code rlsv3.RateLimitResponse_Code
		from string
	}{
		{"x", "x", rlsv3.RateLimitResponse_OK, "a"},        // both pass: the first value is kept
		{"x", "y", rlsv3.RateLimitResponse_OK, "b"},        // a is over, a quota: b passes
		{"x", "y", rlsv3.RateLimitResponse_OVER_LIMIT, ""}, // both are over
	} {
		if code, from := ask(want.a, want.b); code != want.code || from != want.from {
			t.Fatalf("request %d: %v, metadata from %q; want %v, %q", i, code, from, want.code, want.from)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
