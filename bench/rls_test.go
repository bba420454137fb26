package bench

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
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// BenchmarkRLS sends the same ShouldRateLimit requests (10,000 distinct
// descriptors, 16 in flight per CPU, over one loopback connection) to
// Funnel's rate-limit service on the memory store and to a no-op gRPC
// server that answers each with a fixed response of the same shape: the
// ceiling of any gRPC service on this machine. The ratio of their
// decisions/s is the service's cost.
func BenchmarkRLS(b *testing.B) {
	b.Run("funnel-memstore", func(b *testing.B) {
		r, err := rules.Parse(strings.NewReader(rlsRules), "bench.yaml", rules.Options{})
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
		runRLS(b, l.Addr().String())
	})
	b.Run("noop-grpc", func(b *testing.B) {
		g := grpc.NewServer()
		rlsv3.RegisterRateLimitServiceServer(g, &noopRLS{resp: &rlsv3.RateLimitResponse{
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
		runRLS(b, l.Addr().String())
	})
}

const rlsRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
`

// noopRLS answers every request with the same response.
type noopRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	resp *rlsv3.RateLimitResponse
}

func (n *noopRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return n.resp, nil
}

// runRLS sends the benchmark's requests over one connection to addr.
func runRLS(b *testing.B, addr string) {
	const keys = 10000
	reqs := make([]*rlsv3.RateLimitRequest, keys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimit.RateLimitDescriptor{
			{Entries: []*ratelimit.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}},
		}}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	if _, err := client.ShouldRateLimit(context.Background(), reqs[0]); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			r, err := client.ShouldRateLimit(ctx, reqs[next.Add(1)%keys])
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
