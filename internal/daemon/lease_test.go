package daemon_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/redistest"
)

// Two daemons lease the same funnels from one Redis: together they admit
// no more than the funnel, each answers from its leases, and the lease
// counters are on /metrics. CL.THROTTLE's reply is redis-cell's, computed
// from the configured limit (see package leasestore).
func TestDaemonLeases(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	var fronts []*redis.Client
	var metricsURL string
	for i := range 2 {
		cfg := testConfig()
		cfg.Store = "redis://" + srv.Addr + "/0"
		cfg.Lease = 200 * time.Millisecond
		cfg.MetricsOpen = true
		d, _, stop := start(t, cfg)
		defer stop()
		c := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
		defer c.Close()
		fronts = append(fronts, c)
		if i == 0 {
			metricsURL = "http://" + d.HTTPAddr().String() + "/metrics"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// 100 per second, burst 100: leased under a burst of 80.
	got, err := fronts[0].Do(ctx, "CL.THROTTLE", "k", 99, 100, 1).Int64Slice()
	if err != nil || got[0] != 0 || got[1] != 100 {
		t.Fatalf("first CL.THROTTLE = %v, %v; want allowed, limit 100", got, err)
	}
	start := time.Now()
	admitted := 1
	for i := range 400 {
		r, err := fronts[i%2].Do(ctx, "CL.THROTTLE", "k", 99, 100, 1).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if r[0] == 0 {
			admitted++
		}
	}
	// The funnel admits 100 at once and 100 a second after.
	bound := 100 + int(time.Since(start)*100/time.Second) + 1
	if admitted > bound || admitted < 60 {
		t.Fatalf("admitted %d of 401 in %v; the funnel admits at most %d", admitted, time.Since(start), bound)
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`funnel_lease_decisions_total{how="local"}`, `funnel_lease_units_total{state="leased"}`, `funnel_lease_calls_total{kind="decision"}`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics has no %s", want)
		}
	}
	t.Logf("two daemons admitted %d of 401 in %v", admitted, time.Since(start))
}
