package rls_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/config"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
)

// The two benchmarks below run the same requests over the same loopback
// gRPC connection, one against the service over the memory store, the other
// against a server that answers every request with a fixed response of the
// same shape without deciding anything: the ceiling of any gRPC service on
// this machine. Compare them with
//
//	go test -run '^$' -bench 'ShouldRateLimit|NoopServer' -cpu 2 ./rls

// benchKeys is the number of distinct descriptors the requests cycle over.
const benchKeys = 10000

const benchRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
`

// benchParallelism is the number of requests in flight per GOMAXPROCS, so
// that the client keeps the server busy despite the round trips.
const benchParallelism = 16

func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimit.RateLimitDescriptor{
			{Entries: []*ratelimit.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}},
		}}
	}
	return reqs
}

// runBench sends the requests over one connection to addr, in parallel.
func runBench(b *testing.B, addr string) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := benchRequests()
	if _, err := client.ShouldRateLimit(context.Background(), reqs[0]); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			r, err := client.ShouldRateLimit(ctx, reqs[next.Add(1)%benchKeys])
			if err != nil {
				b.Error(err)
				return
			}
			if r.OverallCode != rlsv3.RateLimitResponse_OK {
				b.Errorf("refused: %v", r)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

func BenchmarkShouldRateLimit(b *testing.B) {
	r, err := config.ParseRules(strings.NewReader(benchRules), "bench.yaml", config.RulesOptions{})
	if err != nil {
		b.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	srv := rls.New(funnel.New(store), rls.Static(r), rls.Options{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()
	runBench(b, l.Addr().String())
}

// noop answers every request with the same OK response, as the service
// answers the benchmark's requests, without deciding anything.
type noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
	resp *rlsv3.RateLimitResponse
}

func (n *noop) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return n.resp, nil
}

func BenchmarkNoopServer(b *testing.B) {
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, &noop{resp: &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
			Code:               rlsv3.RateLimitResponse_OK,
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 4000000000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
			LimitRemaining:     3999999999,
			DurationUntilReset: durationpb.New(1e9 - 1),
		}},
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go g.Serve(l)
	defer g.Stop()
	runBench(b, l.Addr().String())
}

// BenchmarkDecide calls ShouldRateLimit directly, without gRPC: the cost
// of the decision that the service adds to a round trip.
func BenchmarkDecide(b *testing.B) {
	r, err := config.ParseRules(strings.NewReader(benchRules), "bench.yaml", config.RulesOptions{})
	if err != nil {
		b.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	srv := rls.New(funnel.New(store), rls.Static(r), rls.Options{})
	reqs := benchRequests()
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := srv.ShouldRateLimit(ctx, reqs[next.Add(1)%benchKeys]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
