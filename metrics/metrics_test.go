package metrics_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/storetest"
)

// scrape fetches m's metrics with a real client from a server on
// 127.0.0.1:0 and returns the sample lines by series ("name{labels}").
func scrape(t *testing.T, m *metrics.Metrics) map[string]string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q", ct)
	}
	series := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series[line[:i]] = line[i+1:]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return series
}

func want(t *testing.T, series map[string]string, name, value string) {
	t.Helper()
	if got, ok := series[name]; !ok {
		t.Errorf("%s missing", name)
	} else if got != value {
		t.Errorf("%s = %s, want %s", name, got, value)
	}
}

func TestDecisions(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	m.ObserveDecision("login", funnel.Result{Allowed: true})
	m.ObserveDecision("login", funnel.Result{Allowed: true})
	m.ObserveDecision("login", funnel.Result{})
	m.ObserveDecision("login", funnel.Result{Banned: true})
	m.ObserveDecision("api", funnel.Result{Allowed: true, Fallback: true})
	m.ObserveDecision("api", funnel.Result{Allowed: false, Fallback: true})
	obs := m.Observer("api")
	obs(funnel.Result{Allowed: true}, nil)
	obs(funnel.Result{}, errors.New("boom"))

	s := scrape(t, m)
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="login"}`, "2")
	want(t, s, `funnel_decisions_total{outcome="refused",rule="login"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="banned",rule="login"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="fallback",rule="login"}`, "0")
	want(t, s, `funnel_decisions_total{outcome="fallback",rule="api"}`, "2")
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="api"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="error",rule="api"}`, "1")
	want(t, s, `funnel_fail_open_total{rule="api"}`, "1")
	want(t, s, `funnel_fail_open_total{rule="login"}`, "0")
	for k := range s {
		if strings.HasPrefix(k, "go_") || strings.HasPrefix(k, "process_") {
			t.Errorf("runtime metric %s with NoRuntimeMetrics", k)
		}
	}
}

// Fail-open answers that another part counts itself are in
// funnel_fail_open_total beside the rules' own.
func TestFailOpenFunc(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	m.ObserveDecision("api", funnel.Result{Allowed: true, Fallback: true})
	n := 0.0
	if err := m.FailOpenFunc("resp", func() float64 { n++; return n }); err != nil {
		t.Fatal(err)
	}
	if err := m.FailOpenFunc("resp", func() float64 { return 0 }); err == nil {
		t.Error("the same rule added twice")
	}
	s := scrape(t, m)
	want(t, s, `funnel_fail_open_total{rule="api"}`, "1")
	want(t, s, `funnel_fail_open_total{rule="resp"}`, "1")
	s = scrape(t, m)
	want(t, s, `funnel_fail_open_total{rule="resp"}`, "2")
	var nilM *metrics.Metrics
	if err := nilM.FailOpenFunc("resp", nil); err != nil {
		t.Error(err)
	}
}

func TestRuntimeMetrics(t *testing.T) {
	s := scrape(t, metrics.New(metrics.Options{}))
	if _, ok := s["go_goroutines"]; !ok {
		t.Error("go_goroutines missing")
	}
}

// Rules beyond MaxRules share one label: a caller that passes keys as rule
// names cannot grow the series without bound.
func TestRuleCardinalityBound(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true, MaxRules: 3})
	for i := range 100 {
		m.ObserveDecision(fmt.Sprintf("r%d", i), funnel.Result{Allowed: true})
	}
	s := scrape(t, m)
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="r0"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="r2"}`, "1")
	want(t, s, `funnel_decisions_total{outcome="allowed",rule="_other"}`, "97")
	n := 0
	for k := range s {
		if strings.HasPrefix(k, "funnel_decisions_total{") {
			n++
		}
	}
	if n != 4*5 {
		t.Errorf("%d decision series, want 20", n)
	}
}

func TestRulesReloaded(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	s := scrape(t, m)
	want(t, s, `funnel_rules_reloads_total{result="success"}`, "0")
	want(t, s, `funnel_rules_reloads_total{result="failure"}`, "0")
	want(t, s, `funnel_rules_last_reload_success_timestamp_seconds`, "0")

	before := time.Now()
	m.RulesReloaded(nil)
	m.RulesReloaded(errors.New("bad yaml"))
	m.RulesReloaded(errors.New("bad yaml"))
	s = scrape(t, m)
	want(t, s, `funnel_rules_reloads_total{result="success"}`, "1")
	want(t, s, `funnel_rules_reloads_total{result="failure"}`, "2")
	want(t, s, `ratelimit_service_config_load_success`, "1")
	want(t, s, `ratelimit_service_config_load_error`, "2")
	var ts float64
	fmt.Sscan(s[`funnel_rules_last_reload_success_timestamp_seconds`], &ts)
	if d := ts - float64(before.Unix()); d < 0 || d > 60 {
		t.Errorf("last success timestamp %v, reloaded at %v", ts, before.Unix())
	}
}

func TestConnectedClients(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	n := 3
	if err := m.ConnectedClients("resp", func() int { return n }); err != nil {
		t.Fatal(err)
	}
	if err := m.ConnectedClients("resp", func() int { return 0 }); err == nil {
		t.Error("registering resp twice: no error")
	}
	if err := m.ConnectedClients("grpc", func() int { return 1 }); err != nil {
		t.Fatal(err)
	}
	want(t, scrape(t, m), `funnel_connected_clients{protocol="resp"}`, "3")
	n = 5
	s := scrape(t, m)
	want(t, s, `funnel_connected_clients{protocol="resp"}`, "5")
	want(t, s, `funnel_connected_clients{protocol="grpc"}`, "1")
}

// A nil *Metrics is a valid "metrics off".
func TestNil(t *testing.T) {
	var m *metrics.Metrics
	m.ObserveDecision("x", funnel.Result{})
	m.ObserveError("x")
	m.Observer("x")(funnel.Result{}, nil)
	m.RulesReloaded(nil)
	if err := m.ConnectedClients("resp", func() int { return 0 }); err != nil {
		t.Error(err)
	}
	st := memstore.New(memstore.Options{})
	defer st.Close()
	if got := metrics.InstrumentStore(st, nil); got != funnel.Store(st) {
		t.Error("InstrumentStore(s, nil) is not s")
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("nil Handler: status %d", resp.StatusCode)
	}
}

// The wrapper changes no answer: the whole conformance suite passes through
// it.
func TestInstrumentStoreConformance(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	storetest.Run(t, func(t *testing.T, now func() int64) funnel.Store {
		s := memstore.New(memstore.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return metrics.InstrumentStore(s, m)
	})
	s := scrape(t, m)
	if s[`funnel_store_duration_seconds_count{op="throttle"}`] == "0" {
		t.Error("no throttle observed")
	}
}

// fakeStore is a store whose answers the test chooses.
type fakeStore struct {
	do func(ops []funnel.Op, res []funnel.Result) error
}

func (f *fakeStore) Do(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
	return f.do(ops, res)
}
func (f *fakeStore) Reset(context.Context, string) (bool, error) { return false, funnel.ErrUnavailable }
func (f *fakeStore) TTL(context.Context, string) (time.Duration, bool, error) {
	return 0, false, nil
}
func (f *fakeStore) Bans(context.Context) ([]funnel.Ban, error) { return nil, nil }
func (f *fakeStore) Unban(context.Context, string) (bool, error) {
	return false, context.Canceled
}

func TestInstrumentStoreErrors(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	fe := &fakeStore{do: func(ops []funnel.Op, res []funnel.Result) error {
		switch ops[0].Key {
		case "down":
			return fmt.Errorf("redisstore: dial: %w", funnel.ErrUnavailable)
		case "fallback":
			res[0] = funnel.Result{Allowed: true, Fallback: true}
			return nil
		case "slow":
			return context.DeadlineExceeded
		case "wrong":
			return funnel.ErrWrongType
		case "slots":
			return fmt.Errorf("redisstore: %w", funnel.ErrCrossSlot)
		}
		res[0] = funnel.Result{Allowed: true}
		return nil
	}}
	st := metrics.InstrumentStore(fe, m)
	ctx := context.Background()
	p, _ := funnel.PerSecond(10).Params()
	for _, k := range []string{"ok", "down", "fallback", "slow", "ok"} {
		storetest.Throttle(ctx, st, k, p, 1)
	}
	st.Reset(ctx, "x")
	c, _ := funnel.Limit{Count: 1, Period: time.Second, Algorithm: funnel.FixedWindow}.Check()
	for _, k := range []string{"wrong", "slots", "fine"} {
		st.Do(ctx, []funnel.Op{{Key: k, Limit: c, N: 1}}, make([]funnel.Result, 1))
	}
	st.Unban(ctx, "x")

	s := scrape(t, m)
	// One funnel decision without a ban is op="throttle", any other Do op="do".
	want(t, s, `funnel_store_duration_seconds_count{op="throttle"}`, "5")
	want(t, s, `funnel_store_duration_seconds_count{op="do"}`, "3")
	// A store's own failure and its fallback are unavailable; the caller's
	// deadline passing is the caller's (funnel.ClassOf).
	want(t, s, `funnel_store_errors_total{kind="unavailable",op="throttle"}`, "2")
	want(t, s, `funnel_store_errors_total{kind="canceled",op="throttle"}`, "1")
	want(t, s, `funnel_store_errors_total{kind="other",op="throttle"}`, "0")
	want(t, s, `funnel_store_errors_total{kind="unavailable",op="reset"}`, "1")
	want(t, s, `funnel_store_errors_total{kind="wrong_type",op="do"}`, "1")
	want(t, s, `funnel_store_errors_total{kind="cross_slot",op="do"}`, "1")
	want(t, s, `funnel_store_errors_total{kind="canceled",op="unban"}`, "1")
}

func TestInstrumentStoreNonBlocking(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	nb, ok := metrics.InstrumentStore(st, m).(interface{ NonBlocking() bool })
	if !ok || !nb.NonBlocking() {
		t.Error("the wrapper of a memstore is not NonBlocking")
	}
	nb = metrics.InstrumentStore(&fakeStore{}, m).(interface{ NonBlocking() bool })
	if nb.NonBlocking() {
		t.Error("the wrapper of a plain store says NonBlocking")
	}
}

func BenchmarkInstrumentedThrottle(b *testing.B) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	st := memstore.New(memstore.Options{})
	defer st.Close()
	lim := funnel.New(metrics.InstrumentStore(st, m))
	limit := funnel.PerSecond(1 << 20)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, _ := lim.Allow(ctx, "k", limit)
		m.ObserveDecision("bench", r)
	}
}

func BenchmarkPlainThrottle(b *testing.B) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	lim := funnel.New(st)
	limit := funnel.PerSecond(1 << 20)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lim.Allow(ctx, "k", limit)
	}
}

func TestConnCounter(t *testing.T) {
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	var conns metrics.ConnCounter
	if err := m.ConnectedClients("http", conns.Count); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	entered := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	srv.Config.ConnState = conns.ConnState
	srv.Start()
	defer srv.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	want(t, scrape(t, m), `funnel_connected_clients{protocol="http"}`, "1")
	close(release)
	<-done
	srv.Close() // waits for the connection to be closed
	if n := conns.Count(); n != 0 {
		t.Errorf("%d connections after close", n)
	}
}

// A leasing store's counters take the registry's namespace, as every other
// metric does, and this package does not bring the Redis clients with it.
func TestLeasesNamespace(t *testing.T) {
	m := metrics.New(metrics.Options{Namespace: "edge"})
	if err := m.Leases(func() metrics.LeaseStats { return metrics.LeaseStats{Decisions: 7, Local: 5, Spent: 3} }); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, m)
	for series, want := range map[string]string{
		`edge_lease_decisions_total{how="local"}`:  "5",
		`edge_lease_decisions_total{how="waited"}`: "2",
		`edge_lease_units_total{state="spent"}`:    "3",
	} {
		if got[series] != want {
			t.Errorf("%s = %q, want %q", series, got[series], want)
		}
	}
	for series := range got {
		if strings.HasPrefix(series, "funnel_lease") {
			t.Errorf("%s ignores the namespace", series)
		}
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/funnelrl/funnel/metrics").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "leasestore") || strings.Contains(dep, "redis") {
			t.Errorf("metrics depends on %s", dep)
		}
	}
}
