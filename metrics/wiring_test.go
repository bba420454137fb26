package metrics_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
)

// The metrics as the daemon wires them: the store instrumented, the HTTP
// API's decisions observed under one rule, /metrics served by the API.
func TestWithHTTPAPI(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	lim := funnel.New(metrics.InstrumentStore(st, m))
	srv := httptest.NewServer(httpapi.New(lim, httpapi.Options{Metrics: m.Handler(), Observe: m.Observer("http")}))
	defer srv.Close()

	body := `{"key":"k","limit":{"count":2,"period":"1m"}}`
	for range 3 {
		resp, err := srv.Client().Post(srv.URL+"/v1/throttle", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`funnel_decisions_total{outcome="allowed",rule="http"} 2`,
		`funnel_decisions_total{outcome="refused",rule="http"} 1`,
		`funnel_store_duration_seconds_count{op="throttle"} 3`,
	} {
		if !strings.Contains(string(text), line+"\n") {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if strings.Contains(string(text), `"k"`) {
		t.Error("a key appears in the metrics")
	}
}

// The middleware's decisions observed under its rule.
func TestWithMiddleware(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	mw, err := httplimit.New(funnel.New(st), funnel.PerMinute(1), httplimit.ClientIP(), httplimit.Observe(m.Observer("per-ip")))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.NotFoundHandler()))
	defer srv.Close()
	for range 2 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	s := scrape(t, m)
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="per-ip"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="refused",rule="per-ip"}`, "1")
}
