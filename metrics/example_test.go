package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
)

func Example() {
	m := metrics.New(metrics.Options{})
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim := funnel.New(metrics.InstrumentStore(store, m)) // store latency and errors

	limit := funnel.PerMinute(2)
	for range 3 {
		r, err := lim.Allow(context.Background(), "user:42", limit)
		if err != nil {
			panic(err)
		}
		m.ObserveDecision("per-user", r) // by rule, never by key
	}

	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, "funnel_decisions_total{") && !strings.HasSuffix(line, " 0") ||
			strings.HasPrefix(line, "funnel_store_duration_seconds_count") {
			fmt.Println(line)
		}
	}
	// Output:
	// funnel_decisions_total{outcome="allowed",rule="per-user"} 2
	// funnel_decisions_total{outcome="refused",rule="per-user"} 1
	// funnel_store_duration_seconds_count{op="bans"} 0
	// funnel_store_duration_seconds_count{op="do"} 0
	// funnel_store_duration_seconds_count{op="gcra"} 0
	// funnel_store_duration_seconds_count{op="reserve"} 0
	// funnel_store_duration_seconds_count{op="reset"} 0
	// funnel_store_duration_seconds_count{op="settle"} 0
	// funnel_store_duration_seconds_count{op="throttle"} 3
	// funnel_store_duration_seconds_count{op="ttl"} 0
	// funnel_store_duration_seconds_count{op="unban"} 0
}
