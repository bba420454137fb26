package rls_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// clusterAlgorithms are the algorithms of rules whose charges a refused
// request's refund must give back exactly (on one fixed instant).
var clusterAlgorithms = []string{"fixed_window", "gcra", "sliding_window", "sliding_log", "leaky_bucket"}

// clusterEnv is a server over a Redis Cluster of 3 masters and 3
// replicas, with the rules of domain d: a (7 a minute), b (5), c (100) and
// s (1, in shadow mode), all of algorithm alg, and descriptors of each
// whose keys are on three different masters (s on another slot than a).
type clusterEnv struct {
	*env
	lim        *funnel.Limiter
	set        *rules.Set
	domain     string
	a, b, c, s *ratelimit.RateLimitDescriptor
}

// startCluster starts the cluster and the store that the tests of one
// function share; the store's clock is fixed at t0, and its timeout is long
// (these tests are of what is decided, not of how fast: on a loaded machine
// the default 100 ms answered "unavailable").
func startCluster(t *testing.T) (*redistest.Cluster, *redisstore.Store, *storetest.Clock) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 1)
	clock := storetest.NewClock(t0.UnixNano())
	s, err := redisstore.Open("redis-cluster://"+strings.Join(cl.Addrs(), ","), redisstore.Options{Now: clock.Now, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return cl, s, clock
}

func newClusterEnv(t *testing.T, cl *redistest.Cluster, store *redisstore.Store, clock *storetest.Clock, alg string) *clusterEnv {
	t.Helper()
	d := "d_" + alg
	src := fmt.Sprintf(`
domain: %s
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 7, algorithm: %[2]s}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 5, algorithm: %[2]s}}
  - {key: c, rate_limit: {unit: minute, requests_per_unit: 100, algorithm: %[2]s}}
  - {key: s, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1, algorithm: %[2]s}}
`, d, alg)
	set, err := rules.Parse(strings.NewReader(src), d+".yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ce := &clusterEnv{set: set, domain: d, lim: funnel.New(store)}
	ce.env = start(t, store, rls.Static(set), rls.Options{})
	ce.env.clock = clock
	// Values whose keys are on three masters, and s's on another slot
	// than a's.
	masters := map[int]bool{}
	for _, f := range []struct {
		k string
		d **ratelimit.RateLimitDescriptor
	}{{"a", &ce.a}, {"b", &ce.b}, {"c", &ce.c}} {
		for i := 0; ; i++ {
			dd := desc(f.k, fmt.Sprintf("v%d", i))
			if m := cl.MasterOf(ce.key(t, dd)); m >= 0 && !masters[m] {
				masters[m] = true
				*f.d = dd
				break
			}
		}
	}
	for i := 0; ; i++ {
		dd := desc("s", fmt.Sprintf("v%d", i))
		if store.Group(ce.key(t, dd)) != store.Group(ce.key(t, ce.a)) {
			ce.s = dd
			break
		}
	}
	return ce
}

// key returns the store key of descriptor d.
func (ce *clusterEnv) key(t *testing.T, d *ratelimit.RateLimitDescriptor) string {
	t.Helper()
	m, ok := ce.set.Match(ce.domain, entriesOf(d))
	if !ok {
		t.Fatalf("no rule for %v", d)
	}
	return m.Key
}

// remaining peeks at what descriptor d's key has left.
func (ce *clusterEnv) remaining(t *testing.T, d *ratelimit.RateLimitDescriptor) int64 {
	t.Helper()
	m, _ := ce.set.Match(ce.domain, entriesOf(d))
	r, err := ce.lim.Peek(context.Background(), m.Key, m.Rule.Limit)
	if err != nil {
		t.Fatal(err)
	}
	return r.Remaining
}

func entriesOf(d *ratelimit.RateLimitDescriptor) []rules.Entry {
	var es []rules.Entry
	for _, e := range d.Entries {
		es = append(es, rules.Entry{Key: e.Key, Value: e.Value})
	}
	return es
}

// A request whose descriptors are on three masters of a Redis Cluster is
// decided, over a real gRPC client: admitted, it is charged to every limit;
// refused by one (b), the others' charges are refunded, so that each limit
// is charged only the requests it admitted, whatever the algorithm. A rule
// in shadow mode on another slot refuses without refusing the request,
// which is then charged to the others, as on a single Redis.
func TestClusterSeveralSlots(t *testing.T) {
	t.Parallel()
	cl, store, clock := startCluster(t)
	for _, alg := range clusterAlgorithms {
		t.Run(alg, func(t *testing.T) {
			e := newClusterEnv(t, cl, store, clock, alg)
			e.expectCodes(t, 5, "OK OK OK OK", e.domain, e.a, e.b, e.c)
			r := e.ask(t, e.domain, e.a, e.b, e.c)
			if got := codesOf(r); got != "OVER_LIMIT OK OVER_LIMIT OK" {
				t.Fatalf("request 6: %s", got)
			}
			if r.Statuses[0].LimitRemaining != 2 || r.Statuses[2].LimitRemaining != 95 {
				t.Errorf("request 6: remaining a %d, c %d; want 2, 95 (their state after the refund)",
					r.Statuses[0].LimitRemaining, r.Statuses[2].LimitRemaining)
			}
			if a, b, c := e.remaining(t, e.a), e.remaining(t, e.b), e.remaining(t, e.c); a != 2 || b != 0 || c != 95 {
				t.Fatalf("remaining after the refusal: a %d, b %d, c %d; want 2, 0, 95", a, b, c)
			}
			// Shadow mode on another slot: s refuses from its second
			// request on, the request goes on and is charged to a.
			e.expectCodes(t, 2, "OK OK OK", e.domain, e.a, e.s)
			if a, s := e.remaining(t, e.a), e.remaining(t, e.s); a != 0 || s != 0 {
				t.Fatalf("remaining after the shadow requests: a %d, s %d; want 0, 0", a, s)
			}
			e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT OK", e.domain, e.a, e.c)
			if c := e.remaining(t, e.c); c != 95 {
				t.Fatalf("c has %d left, want 95", c)
			}
		})
	}
}

// Concurrent requests over several slots, from 8 gRPC clients at once:
// no limit admits more than it allows (b: 5), and once they are done,
// every key is charged exactly the requests admitted, though some were
// refused for a charge that was being refunded.
func TestClusterConcurrentRefunds(t *testing.T) {
	t.Parallel()
	cl, store, clock := startCluster(t)
	for _, alg := range []string{"fixed_window", "gcra"} {
		t.Run(alg, func(t *testing.T) {
			e := newClusterEnv(t, cl, store, clock, alg)
			var admitted, refused atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
							Domain: e.domain, Descriptors: []*ratelimit.RateLimitDescriptor{e.a, e.b, e.c}})
						if err != nil {
							errs <- err
							return
						}
						if r.OverallCode == OK {
							admitted.Add(1)
						} else {
							refused.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			during := admitted.Load()
			// What the storm left is admitted now, one request at a time.
			for admitted.Load() < 6 && codesOf(e.ask(t, e.domain, e.a, e.b, e.c)) == "OK OK OK OK" {
				admitted.Add(1)
			}
			t.Logf("%d admitted during the storm (%d refused), %d in all", during, refused.Load(), admitted.Load())
			if admitted.Load() != 5 {
				t.Fatalf("%d admitted in all, want 5 (b's limit)", admitted.Load())
			}
			if a, b, c := e.remaining(t, e.a), e.remaining(t, e.b), e.remaining(t, e.c); a != 2 || b != 0 || c != 95 {
				t.Fatalf("remaining: a %d, b %d, c %d; want 2, 0, 95 (charged 5 each)", a, b, c)
			}
		})
	}
}

// A slot that fails (b's key holds something else than a limit's state)
// fails the request, and the slots that admitted it are refunded.
func TestClusterRefundOnError(t *testing.T) {
	t.Parallel()
	cl, store, clock := startCluster(t)
	e := newClusterEnv(t, cl, store, clock, "fixed_window")
	if err := cl.Client().Set(context.Background(), e.key(t, e.b), "not a limit", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: e.domain, Descriptors: []*ratelimit.RateLimitDescriptor{e.a, e.b, e.c}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("%v, want FailedPrecondition", err)
	}
	if a, c := e.remaining(t, e.a), e.remaining(t, e.c); a != 7 || c != 100 {
		t.Fatalf("remaining: a %d, c %d; want 7, 100 (refunded)", a, c)
	}
}
