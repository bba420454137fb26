package daemon_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/funnelrl/funnel/internal/testcerts"
)

// funnel serve --rules-xds: the daemon takes its rules from a
// go-control-plane server, over mutual TLS, with its node id and headers,
// and Envoy's rate-limit service decides by them.
func TestDaemonRulesXDS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "xds CA")
	acks := make(chan *discoveryv3.DiscoveryRequest, 10)
	heads := make(chan metadata.MD, 10)
	snaps := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	cb := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			heads <- md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			if req.ResponseNonce != "" {
				acks <- req
			}
			return nil
		},
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "control-plane").TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
		MinVersion:   tls.VersionTLS12,
	})))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, server.NewServer(context.Background(), snaps, cb))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	snap, err := cache.NewSnapshot("v1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: {
		&rlsconfv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "user", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 1},
		}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := snaps.SetSnapshot(context.Background(), "edge-1", snap); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.RESP = ""
	cfg.RulesXDS = ln.Addr().String()
	cfg.RulesXDSNodeID = "edge-1"
	cfg.RulesXDSHeaders = "x-tenant:blue"
	cfg.RulesXDSCA = ca.Write(t, dir, "ca")
	cfg.RulesXDSCert, cfg.RulesXDSKey = ca.Client(t, "funnel").Write(t, dir, "client")
	cfg.RulesXDSServerName = "localhost" // checked instead of the address
	cfg.RulesXDSMaxMsgSize = 1 << 20
	d, logs, stop := start(t, cfg)
	select {
	case ack := <-acks:
		if ack.VersionInfo != "v1" || ack.ErrorDetail != nil {
			t.Fatalf("ACK: %v", ack)
		}
	case <-time.After(waitFor):
		t.Fatalf("no ACK from the daemon:\n%s", logs)
	}
	if md := <-heads; strings.Join(md.Get("x-tenant"), ",") != "blue" {
		t.Errorf("stream headers: %v", md)
	}

	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		res, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}},
		}}})
		if err != nil || res.OverallCode != want {
			t.Fatalf("request %d: %v, %v; want %v", i, res, err, want)
		}
	}
	res, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `funnel_rules_reloads_total{result="success"} 1`) {
		t.Errorf("/metrics lacks one successful rules load:\n%s", body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
