package rls_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// t0 is the start of a minute, of an hour and of a day.
var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

const (
	OK   = rlsv3.RateLimitResponse_OK
	OVER = rlsv3.RateLimitResponse_OVER_LIMIT
)

// env is a server on 127.0.0.1:0 over a memory store with a fake clock, and
// a client connected to it.
type env struct {
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	clock  *storetest.Clock
	srv    *rls.Server
}

func start(t testing.TB, store funnel.Store, rules rls.RulesSource, opts rls.Options) *env {
	t.Helper()
	e := &env{clock: storetest.NewClock(t0.UnixNano())}
	if store == nil {
		store = memstore.New(memstore.Options{Now: e.clock.Now})
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Unix(0, e.clock.Now()) }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	e.srv = rls.New(funnel.New(store), rules, opts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, l) }()
	e.conn, err = grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	e.client = rlsv3.NewRateLimitServiceClient(e.conn)
	t.Cleanup(func() {
		e.conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return e
}

func loadRules(t testing.TB, path string) rls.RulesSource {
	t.Helper()
	r, err := rules.Load(path, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rls.Static(r)
}

func envoyExamples(t *testing.T) *env {
	return start(t, nil, loadRules(t, "../rules/testdata/envoy"), rls.Options{})
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *ratelimit.RateLimitDescriptor {
	d := &ratelimit.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimit.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (e *env) ask(t *testing.T, domain string, ds ...*ratelimit.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	return e.askN(t, domain, 0, ds...)
}

func (e *env) askN(t *testing.T, domain string, hits uint32, ds ...*ratelimit.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// codes returns the overall code and each descriptor's.
func codesOf(r *rlsv3.RateLimitResponse) string {
	s := r.OverallCode.String()
	for _, st := range r.Statuses {
		s += " " + st.Code.String()
	}
	return s
}

// expectCodes asks n times and checks the codes of each answer.
func (e *env) expectCodes(t *testing.T, n int, want string, domain string, ds ...*ratelimit.RateLimitDescriptor) {
	t.Helper()
	for i := 0; i < n; i++ {
		if got := codesOf(e.ask(t, domain, ds...)); got != want {
			t.Fatalf("request %d of %d: %s, want %s", i+1, n, got, want)
		}
	}
}

// Example 1: 500 requests per second for each of two databases.
func TestEnvoyExample1(t *testing.T) {
	e := envoyExamples(t)
	users := desc("database", "users")
	e.expectCodes(t, 500, "OK OK", "mongo_cps", users)
	r := e.ask(t, "mongo_cps", users)
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("request 501: %s", codesOf(r))
	}
	st := r.Statuses[0]
	if st.CurrentLimit.RequestsPerUnit != 500 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("status %v", st)
	}
	e.expectCodes(t, 1, "OK OK", "mongo_cps", desc("database", "default"))
	e.expectCodes(t, 1, "OK OK", "mongo_cps", desc("database", "other")) // no rule
	e.clock.Add(time.Second)
	e.expectCodes(t, 1, "OK OK", "mongo_cps", users)
}

// Example 2: several descriptors in one request; the request is over the
// limit when any of them is.
func TestEnvoyExample2(t *testing.T) {
	e := envoyExamples(t)
	marketing := desc("message_type", "marketing", "to_number", "2061111111")
	number := desc("to_number", "2061111111")
	for i := 1; i <= 5; i++ {
		r := e.ask(t, "messaging", marketing, number)
		if codesOf(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != uint32(5-i) || r.Statuses[1].LimitRemaining != uint32(100-i) {
			t.Fatalf("request %d: %v", i, r)
		}
		if d := r.Statuses[0].DurationUntilReset.AsDuration(); d != 12*time.Hour {
			t.Fatalf("reset in %v, want the end of the UTC day", d)
		}
	}
	e.expectCodes(t, 3, "OVER_LIMIT OVER_LIMIT OK", "messaging", marketing, number)
	// Refused requests were not charged to the 100 per day.
	r := e.ask(t, "messaging", number)
	if codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 94 {
		t.Fatalf("%v", r)
	}
	// Another number has its own limits.
	e.expectCodes(t, 1, "OK OK OK", "messaging", desc("message_type", "marketing", "to_number", "2062222222"), desc("to_number", "2062222222"))
	// The next day, the marketing limit is back.
	e.clock.Add(12 * time.Hour)
	e.expectCodes(t, 1, "OK OK OK", "messaging", marketing, number)
}

// Example 3: the most specific match wins; requests_per_unit 0 blocks.
func TestEnvoyExample3(t *testing.T) {
	e := envoyExamples(t)
	e.expectCodes(t, 10, "OK OK", "edge_proxy_per_ip", desc("remote_address", "50.0.0.1"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "edge_proxy_per_ip", desc("remote_address", "50.0.0.1"))
	e.expectCodes(t, 10, "OK OK", "edge_proxy_per_ip", desc("remote_address", "50.0.0.2"))
	e.expectCodes(t, 3, "OVER_LIMIT OVER_LIMIT", "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	r := e.ask(t, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	if st := r.Statuses[0]; st.CurrentLimit.RequestsPerUnit != 0 || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("%v", st)
	}
}

// Example 4: the request's depth must be the rule's.
func TestEnvoyExample4(t *testing.T) {
	e := envoyExamples(t)
	r := e.ask(t, "example4", desc("key", "value", "subkey", "subvalue"))
	if codesOf(r) != "OK OK" || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 300 {
		t.Fatalf("%v", r)
	}
	e4 := start(t, nil, loadRules(t, "../rules/testdata/envoy_example4"), rls.Options{})
	r = e4.ask(t, "example4", desc("key", "value", "subkey", "subvalue"))
	if codesOf(r) != "OK OK" || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("the two-entry request matched the one-level rule: %v", r)
	}
}

// Example 5: unlimited descriptors answer OK with LimitRemaining MaxUint32.
func TestEnvoyExample5(t *testing.T) {
	e := envoyExamples(t)
	for i := 0; i < 1000; i++ {
		r := e.ask(t, "internal", desc("ldap", "x"))
		if st := r.Statuses[0]; r.OverallCode != OK || st.Code != OK || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
			t.Fatalf("%v", r)
		}
	}
	e.expectCodes(t, 100, "OK OK", "internal", desc("azure", "x"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "internal", desc("azure", "x"))
}

// Example 6: a rule in shadow mode never refuses, and its status is OK as
// envoy's service answers it; only its remaining (0) and the metrics tell
// that it would have refused.
func TestEnvoyExample6(t *testing.T) {
	e := envoyExamples(t)
	a := desc("service", "auth-service", "user", "user-a")
	b := desc("service", "auth-service", "user", "user-b")
	e.expectCodes(t, 10, "OK OK", "example6", a)
	e.expectCodes(t, 5, "OK OK", "example6", a)
	if r := e.ask(t, "example6", a); r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("a shadow refusal reports %d remaining: %v", r.Statuses[0].LimitRemaining, r)
	}
	e.expectCodes(t, 20, "OK OK", "example6", b)
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "example6", b)
}

// Example 7: a rule that replaces another drops its evaluation, and leaves
// its limit untouched.
func TestEnvoyExample7(t *testing.T) {
	e := envoyExamples(t)
	specific := desc("key_1", "value_1", "user", "bkthomps")
	replacing := desc("key_2", "value_2", "user", "bkthomps")
	for i := 0; i < 10; i++ {
		r := e.ask(t, "example7", specific, replacing)
		if codesOf(r) != "OK OK OK" || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.RequestsPerUnit != 10 {
			t.Fatalf("request %d: %v", i+1, r)
		}
	}
	e.expectCodes(t, 1, "OVER_LIMIT OK OVER_LIMIT", "example7", specific, replacing)
	// The replaced 5 per second was not charged.
	e.expectCodes(t, 5, "OK OK", "example7", specific)
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "example7", specific)
	r := e.ask(t, "example7", specific)
	if r.Statuses[0].CurrentLimit.Name != "specific_limit" {
		t.Fatalf("%v", r.Statuses[0].CurrentLimit)
	}
}

// Example 8: detailed_metric counts decisions under the request's value.
func TestEnvoyExample8(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	e := start(t, nil, loadRules(t, "../rules/testdata/envoy"), rls.Options{Observe: func(rule string, _ funnel.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		seen[rule]++
	}})
	e.expectCodes(t, 10, "OK OK", "example8", desc("key1", "unspecified_value"))
	e.expectCodes(t, 10, "OK OK", "example8", desc("key1", "unspecified_value2"))
	e.expectCodes(t, 20, "OK OK", "example8", desc("key1", "value1"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "example8", desc("key1", "value1"))
	e.expectCodes(t, 1, "OK OK", "example8", desc("key1", "unspecified_value3"))
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"example8.key1_unspecified_value": 10, "example8.key1_unspecified_value2": 10,
		"example8.key1_value1": 21, "example8.key1_unspecified_value3": 1}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("metrics %v, want %v", seen, want)
	}
}

// Example 9: a value ending with '*' matches a prefix.
func TestEnvoyExample9(t *testing.T) {
	e := envoyExamples(t)
	e.expectCodes(t, 20, "OK OK", "example9", desc("key1", "value1"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "example9", desc("key1", "value1"))
	e.expectCodes(t, 20, "OK OK", "example9", desc("key1", "value_2"))
	r := e.ask(t, "example9", desc("key1", "valu"))
	if r.Statuses[0].CurrentLimit != nil {
		t.Fatal("a value without the prefix matched")
	}
}

// The README's walk through examples/ratelimit/config/example.yaml.
func TestEnvoyExampleConfig(t *testing.T) {
	e := envoyExamples(t)
	// curl localhost:8888/header -H "foo: foo": 2 per minute
	e.expectCodes(t, 2, "OK OK", "rl", desc("foo", "foo"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "rl", desc("foo", "foo"))
	// curl localhost:8888/twoheader -H "foo: foo" -H "bar: bar": 3 per minute
	e.expectCodes(t, 3, "OK OK", "rl", desc("foo", "foo", "bar", "bar"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "rl", desc("foo", "foo", "bar", "bar"))
	// -H "bar: banned": always limited
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "rl", desc("foo", "foo", "bar", "banned"))
	// -H "baz: baz": 1 per second
	e.expectCodes(t, 1, "OK OK", "rl", desc("foo", "foo", "baz", "baz"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "rl", desc("foo", "foo", "baz", "baz"))
	e.clock.Add(time.Second)
	e.expectCodes(t, 1, "OK OK", "rl", desc("foo", "foo", "baz", "baz"))
}

func TestUnknownDomainIsNotLimited(t *testing.T) {
	e := envoyExamples(t)
	r := e.ask(t, "nope", desc("database", "users"), desc("a", "b"))
	if codesOf(r) != "OK OK OK" || r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("%v", r)
	}
}

func TestBadRequests(t *testing.T) {
	e := envoyExamples(t)
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*ratelimit.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "mongo_cps"},
		{Domain: "mongo_cps", Descriptors: []*ratelimit.RateLimitDescriptor{{
			Entries: desc("database", "users").Entries, HitsAddend: wrapperspb.UInt64(math.MaxUint64)}}},
		{Domain: "mongo_cps", Descriptors: []*ratelimit.RateLimitDescriptor{{
			Entries: desc("database", "users").Entries, Limit: &ratelimit.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}}}},
	} {
		_, err := e.client.ShouldRateLimit(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

const extRules = `
domain: ext
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: quiet_block
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: gcra
    rate_limit: {algorithm: gcra, period: 10s, requests_per_unit: 10, burst: 4}
  - key: slow
    rate_limit: {algorithm: sliding_log, period: 90m, requests_per_unit: 2}
  - key: tiny
    rate_limit: {period: 250ms, requests_per_unit: 5}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 2, ban: 5m}
`

func extEnv(t *testing.T, opts rls.Options) *env {
	t.Helper()
	r, err := rules.Parse(strings.NewReader(extRules), "ext.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return start(t, nil, rls.Static(r), opts)
}

// remaining charges one unit to the descriptor k=v and returns its
// limit_remaining.
func remaining(t *testing.T, e *env, k, v string) uint32 {
	t.Helper()
	return e.ask(t, "ext", desc(k, v)).Statuses[0].LimitRemaining
}

func TestAllOrNothing(t *testing.T) {
	e := extEnv(t, rls.Options{})
	a, b := desc("a", "1"), desc("b", "1")
	e.expectCodes(t, 3, "OK OK OK", "ext", a, b)
	e.expectCodes(t, 4, "OVER_LIMIT OK OVER_LIMIT", "ext", a, b)
	// a was charged 3 times, not 7.
	if got := remaining(t, e, "a", "1"); got != 6 {
		t.Fatalf("a has %d left, want 6", got)
	}
	// A rule that refuses everything charges nothing either.
	e.expectCodes(t, 2, "OVER_LIMIT OK OVER_LIMIT", "ext", a, desc("blocked", "x"))
	if got := remaining(t, e, "a", "1"); got != 5 {
		t.Fatalf("a has %d left, want 5", got)
	}
}

func TestShadowRefusalChargesTheOthers(t *testing.T) {
	e := extEnv(t, rls.Options{})
	a, sh := desc("a", "2"), desc("shadow", "x")
	e.expectCodes(t, 1, "OK OK OK", "ext", a, sh)
	e.expectCodes(t, 2, "OK OK OK", "ext", a, sh)
	e.expectCodes(t, 2, "OK OK OK", "ext", a, desc("quiet_block", "x"))
	if got := remaining(t, e, "a", "2"); got != 4 {
		t.Fatalf("a has %d left, want 4 (every request went on)", got)
	}
}

func TestGlobalShadowMode(t *testing.T) {
	e := extEnv(t, rls.Options{ShadowMode: true})
	e.expectCodes(t, 3, "OK OK", "ext", desc("b", "1"))
	e.expectCodes(t, 2, "OK OVER_LIMIT", "ext", desc("b", "1"))
	e.expectCodes(t, 1, "OK OVER_LIMIT", "ext", desc("blocked", "1"))
}

func TestHitsAddend(t *testing.T) {
	e := extEnv(t, rls.Options{})
	r := e.askN(t, "ext", 4, desc("a", "3"))
	if r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("%v", r)
	}
	// A descriptor's own hits_addend overrides the request's.
	d := desc("a", "3")
	d.HitsAddend = wrapperspb.UInt64(5)
	r = e.askN(t, "ext", 3, d, desc("b", "3"))
	if codesOf(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("%v", r)
	}
	// More than is left: refused, nothing charged.
	r = e.askN(t, "ext", 2, desc("a", "3"))
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("%v", r)
	}
	// hits_addend 0 on a descriptor peeks.
	d = desc("a", "3")
	d.HitsAddend = wrapperspb.UInt64(0)
	if r = e.ask(t, "ext", d); codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("%v", r)
	}
	// Two descriptors on one key are charged once, with both quantities.
	r = e.ask(t, "ext", desc("b", "4"), desc("b", "4"))
	if codesOf(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != 1 || r.Statuses[1].LimitRemaining != 1 {
		t.Fatalf("%v", r)
	}
	// is_negative_hits gives back.
	d = desc("a", "3")
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(5), true
	if r = e.ask(t, "ext", d); codesOf(r) != "OK OK" {
		t.Fatalf("%v", r)
	}
	if got := remaining(t, e, "a", "3"); got != 5 {
		t.Fatalf("a has %d left after the refund and one more, want 5", got)
	}
}

func TestLimitOverride(t *testing.T) {
	e := extEnv(t, rls.Options{})
	d := desc("a", "4")
	d.Limit = &ratelimit.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_HOUR}
	e.expectCodes(t, 2, "OK OK", "ext", d)
	r := e.ask(t, "ext", d)
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Fatalf("%v", r)
	}
	// The override is envoy's: it applies only in a known domain.
	e.expectCodes(t, 5, "OK OK", "unknown", d)
}

func TestFunnelAlgorithms(t *testing.T) {
	e := extEnv(t, rls.Options{})
	g := desc("gcra", "1")
	// burst 4: five at once, then one per second.
	for i := 4; i >= 0; i-- {
		r := e.ask(t, "ext", g)
		if codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != uint32(i) {
			t.Fatalf("%v", r)
		}
	}
	r := e.ask(t, "ext", g)
	st := r.Statuses[0]
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || st.DurationUntilReset.AsDuration() != 5*time.Second ||
		st.CurrentLimit.RequestsPerUnit != 10 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND ||
		st.CurrentLimit.UnitMultiplier.GetValue() != 10 {
		t.Fatalf("%v", r)
	}
	e.clock.Add(time.Second)
	e.expectCodes(t, 1, "OK OK", "ext", g)

	// A sliding log: 2 in any 90 minutes.
	s := desc("slow", "1")
	e.expectCodes(t, 2, "OK OK", "ext", s)
	r = e.ask(t, "ext", s)
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
		r.Statuses[0].CurrentLimit.UnitMultiplier.GetValue() != 90 {
		t.Fatalf("%v", r)
	}

	// 5 per 250 ms is reported as 20 per second.
	r = e.ask(t, "ext", desc("tiny", "1"))
	if l := r.Statuses[0].CurrentLimit; l.RequestsPerUnit != 20 || l.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND || l.UnitMultiplier != nil {
		t.Fatalf("%v", l)
	}
}

// A banned key's duration_until_reset is the time left in its ban, not
// the end of its window (which came 47 s into a 5-minute ban).
func TestBanDurationUntilReset(t *testing.T) {
	e := extEnv(t, rls.Options{})
	d := desc("banned", "1")
	e.clock.Add(13 * time.Second)
	e.expectCodes(t, 2, "OK OK", "ext", d)
	r := e.ask(t, "ext", d) // overflows: banned for 5 minutes
	if st := r.Statuses[0]; codesOf(r) != "OVER_LIMIT OVER_LIMIT" || st.DurationUntilReset.AsDuration() != 5*time.Minute {
		t.Fatalf("the overflow: %v", r)
	}
	e.clock.Add(time.Minute) // a new window, still banned
	r = e.ask(t, "ext", d)
	if st := r.Statuses[0]; codesOf(r) != "OVER_LIMIT OVER_LIMIT" || st.DurationUntilReset.AsDuration() != 4*time.Minute {
		t.Fatalf("during the ban: %v", r)
	}
}

func TestHeaders(t *testing.T) {
	e := extEnv(t, rls.Options{ResponseHeaders: rls.LegacyHeaders(), RequestHeaders: &rls.Headers{Limit: "l", Remaining: "r", Reset: "s"}})
	e.clock.Add(15 * time.Second)
	headers := func(r *rlsv3.RateLimitResponse) string {
		var s []string
		for _, h := range r.ResponseHeadersToAdd {
			s = append(s, h.Key+"="+h.Value)
		}
		return strings.Join(s, " ")
	}
	// The descriptor closest to its limit.
	r := e.ask(t, "ext", desc("a", "5"), desc("b", "5"))
	if got, want := headers(r), "X-RateLimit-Limit=3 X-RateLimit-Remaining=2 X-RateLimit-Reset=45"; got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
	if len(r.RequestHeadersToAdd) != 3 || r.RequestHeadersToAdd[1].Key != "r" || r.RequestHeadersToAdd[1].Value != "2" {
		t.Fatalf("request headers %v", r.RequestHeadersToAdd)
	}
	// The one that refused.
	e.ask(t, "ext", desc("b", "5"))
	e.ask(t, "ext", desc("b", "5"))
	r = e.ask(t, "ext", desc("b", "5"), desc("a", "5"))
	if got, want := headers(r), "X-RateLimit-Limit=3 X-RateLimit-Remaining=0 X-RateLimit-Reset=45"; got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
	// None without a limit, and none by default.
	if r = e.ask(t, "unknown", desc("a", "5")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("%v", r.ResponseHeadersToAdd)
	}
	if r = extEnv(t, rls.Options{}).ask(t, "ext", desc("a", "5")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("%v", r.ResponseHeadersToAdd)
	}
}

// fakeStore is a Store whose Do is a function.
type fakeStore struct {
	do func(ops []funnel.Op, res []funnel.Result) error
}

func (f *fakeStore) Reset(context.Context, string) (bool, error)              { return false, nil }
func (f *fakeStore) TTL(context.Context, string) (time.Duration, bool, error) { return 0, false, nil }
func (f *fakeStore) Do(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
	return f.do(ops, res)
}
func (f *fakeStore) Bans(context.Context) ([]funnel.Ban, error)  { return nil, nil }
func (f *fakeStore) Unban(context.Context, string) (bool, error) { return false, nil }

func TestStoreFailures(t *testing.T) {
	fallback := func(open bool) func([]funnel.Op, []funnel.Result) error {
		return func(ops []funnel.Op, res []funnel.Result) error {
			for i := range ops {
				res[i] = funnel.Result{Fallback: true, Allowed: open}
			}
			return nil
		}
	}
	unreachable := func([]funnel.Op, []funnel.Result) error {
		return fmt.Errorf("%w: dial tcp 10.0.0.7:6379: connection refused", funnel.ErrUnavailable)
	}
	for _, c := range []struct {
		name string
		do   func([]funnel.Op, []funnel.Result) error
		fail funnel.FailMode
		want codes.Code
	}{
		{"unreachable", unreachable, funnel.FailClosed, codes.Unavailable},
		// Options.Fail answers a store's error as a store's own fallback
		// is answered (an error was Unavailable whatever the mode before).
		{"unreachable, fail-open", unreachable, funnel.FailOpen, codes.OK},
		{"fail-closed", fallback(false), funnel.FailOpen, codes.Unavailable},
		{"fail-open", fallback(true), funnel.FailClosed, codes.OK},
		{"cross slot", func([]funnel.Op, []funnel.Result) error { return funnel.ErrCrossSlot }, funnel.FailOpen, codes.FailedPrecondition},
		{"other", func([]funnel.Op, []funnel.Result) error { return errors.New("secret detail") }, funnel.FailOpen, codes.Internal},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := start(t, &fakeStore{do: c.do}, loadRules(t, "../rules/testdata/envoy"), rls.Options{Fail: c.fail})
			var header metadata.MD
			r, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
				Domain: "mongo_cps", Descriptors: []*ratelimit.RateLimitDescriptor{desc("database", "users")}}, grpc.Header(&header))
			if status.Code(err) != c.want {
				t.Fatalf("%v, want %v", err, c.want)
			}
			// A fail-open answer says that it is one, in its headers and
			// its dynamic metadata, and tells no reset; a decision does
			// neither.
			open := c.want == codes.OK
			if got := header.Get(rls.FallbackHeader); open != (len(got) == 1 && got[0] == "open") {
				t.Errorf("headers %v", header)
			}
			if got := r.GetDynamicMetadata().GetFields()["fallback"].GetBoolValue(); got != open {
				t.Errorf("dynamic metadata %v", r.GetDynamicMetadata())
			}
			for _, st := range r.GetStatuses() {
				if st.DurationUntilReset != nil {
					t.Errorf("a fallback tells a reset: %v", st)
				}
			}
			if err != nil && (strings.Contains(err.Error(), "10.0.0.7") || strings.Contains(err.Error(), "secret")) {
				t.Fatalf("the detail was sent: %v", err)
			}
			if c.want == codes.OK && codesOf(r) != "OK OK" {
				t.Fatalf("%v", r)
			}
		})
	}
}

func TestHealthAndReflection(t *testing.T) {
	e := envoyExamples(t)
	h := healthpb.NewHealthClient(e.conn)
	for _, svc := range []string{"", rls.ServiceName} {
		r, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q: %v %v", svc, r, err)
		}
	}
	e.srv.SetServing(false)
	if r, _ := h.Check(context.Background(), &healthpb.HealthCheckRequest{}); r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("%v", r)
	}
	e.srv.SetServing(true)

	stream, err := reflectionpb.NewServerReflectionClient(e.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, rls.ServiceName) || !strings.Contains(got, "grpc.health.v1.Health") {
		t.Fatalf("services %s", got)
	}
	stream.CloseSend()
}

func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(n int) {
		body := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	w, err := rules.Watch(path, rules.WatchOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := start(t, nil, w, rls.Options{})
	e.expectCodes(t, 1, "OK OK", "d", desc("k", "v"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "d", desc("k", "v"))
	write(3)
	eventually.True(t, "the new rules in force", func() bool {
		return e.ask(t, "d", desc("k", "w")).Statuses[0].CurrentLimit.RequestsPerUnit == 3
	})
	// The same key, now under 3 per minute: one charge so far.
	e.expectCodes(t, 2, "OK OK", "d", desc("k", "v"))
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "d", desc("k", "v"))
}

func TestManyDescriptors(t *testing.T) {
	e := extEnv(t, rls.Options{})
	var ds []*ratelimit.RateLimitDescriptor
	for i := 0; i < 40; i++ {
		ds = append(ds, desc("a", fmt.Sprint(i%20)))
	}
	r := e.ask(t, "ext", ds...)
	for i, st := range r.Statuses {
		if st.Code != OK || st.LimitRemaining != 8 {
			t.Fatalf("descriptor %d: %v", i, st)
		}
	}
}

// TestClientInputBounds: the values of a descriptor and the hits of many
// descriptors on one key are the client's; neither may grow the store's
// keys without bound or wrap a charge around to a small one.
func TestClientInputBounds(t *testing.T) {
	var mu sync.Mutex
	var seen []funnel.Op
	store := &fakeStore{do: func(ops []funnel.Op, res []funnel.Result) error {
		mu.Lock()
		seen = append(seen[:0], ops...)
		mu.Unlock()
		for i := range ops {
			res[i] = funnel.Result{Allowed: true}
		}
		return nil
	}}
	r, err := rules.Parse(strings.NewReader("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"), "d.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, store, rls.Static(r), rls.Options{Prefix: "p:"})

	long := strings.Repeat("x", 1<<20)
	e.ask(t, "d", desc("user", long))
	mu.Lock()
	key := seen[0].Key
	mu.Unlock()
	if key != "p:"+funnel.BoundKey("d_user_"+long+"_") || !strings.HasPrefix(key, "p:sha256:") {
		t.Fatalf("a 1 MiB value made a key of %d bytes: %.40q", len(key), key)
	}
	// A key of up to funnel.MaxKeyLen bytes is the store key as it is, as
	// on every edge (rls hashed keys over 256 bytes before).
	mid := strings.Repeat("y", funnel.MaxKeyLen-len("d_user__"))
	e.ask(t, "d", desc("user", mid))
	mu.Lock()
	key = seen[0].Key
	mu.Unlock()
	if key != "p:d_user_"+mid+"_" {
		t.Fatalf("a key of %d bytes was stored as %.40q", funnel.MaxKeyLen, key)
	}
	e.ask(t, "d", desc("user", "short"))
	mu.Lock()
	key = seen[0].Key
	mu.Unlock()
	if key != "p:d_user_short_" {
		t.Fatalf("key %q", key)
	}

	// 1025 descriptors on one key, each with the largest hits_addend: the
	// sum does not fit in an int64, and the charge saturates rather than
	// wraps around.
	big := uint64(math.MaxInt64 / 1024)
	var ds []*ratelimit.RateLimitDescriptor
	for range 1025 {
		d := desc("user", "u")
		d.HitsAddend = wrapperspb.UInt64(big)
		ds = append(ds, d)
	}
	if _, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := seen[0].N
	mu.Unlock()
	if n != math.MaxInt64 {
		t.Fatalf("charged %d, want %d (saturated)", n, int64(math.MaxInt64))
	}
}

// TestHitsOverflowTheFunnel: a hits_addend whose cost does not fit in the
// funnel's nanoseconds is the request's mistake, with one descriptor or
// several.
func TestHitsOverflowTheFunnel(t *testing.T) {
	e := extEnv(t, rls.Options{})
	huge := desc("gcra", "x")
	huge.HitsAddend = wrapperspb.UInt64(1 << 40) // × 1 s per unit
	for _, ds := range [][]*ratelimit.RateLimitDescriptor{{huge}, {huge, desc("a", "x")}} {
		_, err := e.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ext", Descriptors: ds})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%d descriptors: %v, want InvalidArgument", len(ds), err)
		}
	}
}
