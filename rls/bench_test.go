package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// The side-by-side benchmark of the service over gRPC against a no-op gRPC
// server lives in the bench module (BenchmarkRLS); this one measures the
// decision alone.

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

func benchRequests() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, benchKeys)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimit.RateLimitDescriptor{
			{Entries: []*ratelimit.RateLimitDescriptor_Entry{{Key: "remote_address", Value: fmt.Sprintf("10.0.%d.%d", i/256, i%256)}}},
		}}
	}
	return reqs
}

// BenchmarkDecide calls ShouldRateLimit directly, without gRPC: the cost
// of the decision that the service adds to a round trip.
func BenchmarkDecide(b *testing.B) {
	r, err := rules.Parse(strings.NewReader(benchRules), "bench.yaml", rules.Options{})
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
