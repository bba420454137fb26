package daemon_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/redistest"
)

// TestDaemonRLSOnCluster: funnel serve over a Redis Cluster decides a
// request whose descriptors are in two hash slots, over gRPC and /json:
// admitted, it is charged to both; refused by one, the other's charge is
// refunded. The store the daemon wires (instrumented) says its slots.
func TestDaemonRLSOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	cfg := envoyConfig(t, `domain: api
descriptors:
  - {key: user, rate_limit: {unit: day, requests_per_unit: 2, algorithm: gcra}}
  - {key: path, rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}}
`)
	cfg.Store = "redis-cluster://" + strings.Join(cl.Addrs(), ",")
	// A charge or a refund that times out on a loaded machine (the
	// default 100 ms) would fall back or leave its charge: this test is
	// about what the calls do, not how fast.
	cfg.StoreTimeout = 10 * time.Second
	d, _, stop := start(t, cfg)
	path, req := crossSlotRequest(t, d)
	client := dialRLS(t, d.GRPCAddr().String())
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		r, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil || r.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i+1, r, err, want)
		}
		if left := uint32(100 - min(i+1, 2)); r.Statuses[1].LimitRemaining != left {
			t.Fatalf("request %d: path has %d left, want %d", i+1, r.Statuses[1].LimitRemaining, left)
		}
	}
	for _, key := range []string{"api_user_alice_gcra", "api_path_" + path + "_gcra"} {
		if n, err := cl.Client().Exists(context.Background(), key).Result(); err != nil || n != 1 {
			t.Fatalf("%s is not in Redis: %d, %v", key, n, err)
		}
	}
	body := fmt.Sprintf(`{"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}, {"entries": [{"key": "path", "value": %q}]}]}`, path)
	if code, text := httpDo(t, "POST", "http://"+d.HTTPAddr().String()+"/json", "", body); code != http.StatusTooManyRequests {
		t.Fatalf("/json: %d %s", code, text)
	}
	req.Descriptors = req.Descriptors[1:]
	if r, err := client.ShouldRateLimit(context.Background(), req); err != nil || r.Statuses[0].LimitRemaining != 97 {
		t.Fatalf("path alone: %v, %v; want 97 left (the refused requests refunded)", r, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// With --lease, the leasing store says the Redis Cluster's slots too: a
// request whose descriptors are in two slots is decided, not refused with
// FAILED_PRECONDITION.
func TestDaemonRLSOnClusterLeasing(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	cfg := envoyConfig(t, `domain: api
descriptors:
  - {key: user, rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}}
  - {key: path, rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}}
`)
	cfg.Store = "redis-cluster://" + strings.Join(cl.Addrs(), ",")
	cfg.Lease = 200 * time.Millisecond
	d, _, stop := start(t, cfg)
	defer stop()
	_, req := crossSlotRequest(t, d)
	client := dialRLS(t, d.GRPCAddr().String())
	for i := range 3 {
		if r, err := client.ShouldRateLimit(context.Background(), req); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, %v", i+1, r, err)
		}
	}
}

// crossSlotRequest returns a request of two descriptors, user alice and a
// path, whose keys are in two hash slots of d's store (which must say its
// slots), and the path.
func crossSlotRequest(t *testing.T, d *daemon.Daemon) (string, *rlsv3.RateLimitRequest) {
	t.Helper()
	g, ok := d.Store().(funnel.Grouper)
	if !ok {
		t.Fatalf("the daemon's store %T does not say its slots", d.Store())
	}
	// The rules' keys are domain_key_value_ and the algorithm's name.
	path := "p"
	for i := 0; g.Group("api_user_alice_gcra") == g.Group("api_path_"+path+"_gcra"); i++ {
		path = fmt.Sprintf("p%d", i)
	}
	return path, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "path", Value: path}}},
	}}
}

// TestDaemonRLSShortDeadline: Envoy calls the rate-limit service with a
// short deadline (its filter's timeout, 20 ms by default), shorter than a
// quarter of the store's timeout; the decision is made in Redis within it,
// not refused there as late and answered with the fallback (as it was
// when every call's deadline was moved back by a quarter of the store's
// timeout: a 200 ms call on a 1 s store started with a deadline 50 ms in
// the past).
func TestDaemonRLSShortDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := envoyConfig(t, `domain: api
descriptors:
  - {key: user, rate_limit: {unit: day, requests_per_unit: 5, algorithm: gcra}}
`)
	cfg.Store = "redis://" + srv.Addr + "/0"
	cfg.StoreTimeout = time.Second
	d, _, stop := start(t, cfg)
	client := dialRLS(t, d.GRPCAddr().String())
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		var md metadata.MD
		r, err := client.ShouldRateLimit(ctx, userRequest("alice"), grpc.Header(&md))
		cancel()
		if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK || r.Statuses[0].LimitRemaining != uint32(4-i) || len(md.Get("funnel-fallback")) > 0 {
			t.Fatalf("call %d under a 200 ms deadline: %v, %v, header %v; want OK with %d left, decided in Redis", i+1, r, err, md, 4-i)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
