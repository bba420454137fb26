package rls_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// llmRules limit tokens per minute per API key, charged at stream end
// (charge_over_limit), and requests per minute per user, as envoy counts
// them by default only under Options.ChargeOverLimit.
const llmRules = `domain: llm
descriptors:
  - key: api_key
    charge_over_limit: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// redisPrefixes gives each Redis store of these tests its own prefix.
var redisPrefixes atomic.Int64

// llmEnv serves llmRules with opts over the memory store, or over Redis
// when srv is not nil, both on one fake clock.
func llmEnv(t *testing.T, srv *redistest.Server, opts rls.Options) *env {
	t.Helper()
	set, err := rules.Parse(strings.NewReader(llmRules), "llm.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock(t0.UnixNano())
	var store funnel.Store
	if srv != nil {
		store = redisstore.New(srv.Client(), redisstore.Options{Now: clock.Now, Timeout: 20 * time.Second,
			Prefix: fmt.Sprintf("rls%d:", redisPrefixes.Add(1))})
	} else {
		store = memstore.New(memstore.Options{Now: clock.Now})
	}
	opts.Now = func() time.Time { return time.Unix(0, clock.Now()) }
	e := start(t, store, rls.Static(set), opts)
	e.clock = clock
	return e
}

// hits is a descriptor k=v with its own hits_addend.
func hits(n uint64, kv ...string) *ratelimit.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// statusLine is a response's codes and each descriptor's limit_remaining.
func statusLine(e *env, t *testing.T, ds ...*ratelimit.RateLimitDescriptor) string {
	t.Helper()
	r := e.ask(t, "llm", ds...)
	s := codesOf(r)
	for _, st := range r.Statuses {
		s += fmt.Sprintf(" %d", st.LimitRemaining)
	}
	return s
}

func runChargeOverLimit(t *testing.T, srv *redistest.Server) {
	t.Helper()
	// The case: 100 tokens a minute; 80 fit; a stream of 50 is
	// charged anyway (130) and answered OVER_LIMIT, as is the next hit,
	// and a check at request time (hits_addend 0) until the minute ends.
	e := llmEnv(t, srv, rls.Options{})
	for i, s := range []struct {
		d    *ratelimit.RateLimitDescriptor
		want string
	}{
		{hits(0, "api_key", "k1"), "OK OK 100"},
		{hits(80, "api_key", "k1"), "OK OK 20"},
		{hits(50, "api_key", "k1"), "OVER_LIMIT OVER_LIMIT 0"},
		{hits(1, "api_key", "k1"), "OVER_LIMIT OVER_LIMIT 0"},
		{hits(0, "api_key", "k1"), "OVER_LIMIT OVER_LIMIT 0"},
		// Without charge_over_limit: only what fits is charged.
		{hits(80, "user", "u1"), "OK OK 20"},
		{hits(50, "user", "u1"), "OVER_LIMIT OVER_LIMIT 20"},
		{hits(1, "user", "u1"), "OK OK 19"},
		// hits_addend 0 at the limit is OK, as upstream answers it (its
		// count, 100, is not above the limit); above it, OVER_LIMIT.
		{hits(19, "user", "u1"), "OK OK 0"},
		{hits(0, "user", "u1"), "OK OK 0"},
		{hits(0, "api_key", "k2"), "OK OK 100"},
		{hits(100, "api_key", "k2"), "OK OK 0"},
		{hits(0, "api_key", "k2"), "OK OK 0"},
	} {
		if got := statusLine(e, t, s.d); got != s.want {
			t.Errorf("step %d %v: %s, want %s", i, s.d, got, s.want)
		}
	}
	// A key in debt refuses a request, whose other limits are then not
	// charged; its own hit is.
	if got := statusLine(e, t, hits(1, "api_key", "k1"), hits(1, "user", "u2")); got != "OVER_LIMIT OVER_LIMIT OK 0 100" {
		t.Errorf("in debt with another limit: %s", got)
	}
	if got := statusLine(e, t, hits(0, "user", "u2")); got != "OK OK 100" {
		t.Errorf("the other limit was charged: %s", got)
	}
	// The debt ends with the window.
	e.clock.Set(t0.Add(time.Minute).UnixNano())
	if got := statusLine(e, t, hits(0, "api_key", "k1")); got != "OK OK 100" {
		t.Errorf("the next minute: %s", got)
	}

	// Options.ChargeOverLimit (--charge-over-limit): every rule charges
	// every hit, as envoy's service does by default.
	e = llmEnv(t, srv, rls.Options{ChargeOverLimit: true})
	for i, s := range []struct {
		d    *ratelimit.RateLimitDescriptor
		want string
	}{
		{hits(80, "user", "u1"), "OK OK 20"},
		{hits(50, "user", "u1"), "OVER_LIMIT OVER_LIMIT 0"},
		{hits(1, "user", "u1"), "OVER_LIMIT OVER_LIMIT 0"},
	} {
		if got := statusLine(e, t, s.d); got != s.want {
			t.Errorf("ChargeOverLimit step %d %v: %s, want %s", i, s.d, got, s.want)
		}
	}
}

func TestChargeOverLimit(t *testing.T) {
	t.Parallel()
	runChargeOverLimit(t, nil)
}

func TestChargeOverLimitRedis(t *testing.T) {
	t.Parallel()
	runChargeOverLimit(t, redistest.StartServer(t))
}
