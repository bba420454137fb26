package httpapi_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// redisPrefixes gives each Redis-backed API its own key prefix.
var redisPrefixes atomic.Int64

// newRedisAPI serves the HTTP API over a Redis store on srv with a fake
// clock.
func newRedisAPI(t *testing.T, srv *redistest.Server) *api {
	t.Helper()
	c := newClock()
	st := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Timeout: 20 * time.Second,
		Prefix: fmt.Sprintf("httpapi%d:", redisPrefixes.Add(1))})
	return serveAPI(t, funnel.New(st), c, httpapi.Options{})
}

// chargeStep is one request at an offset from the clock's start, with its
// status, body and RateLimit, RateLimit-Policy and Retry-After fields.
type chargeStep struct {
	at                       time.Duration
	path, body               string
	status                   int
	want                     string // the body, or the problem's detail
	rateLimit, policy, retry string
}

// tokens is a limit of 100 tokens per minute, a fixed window.
const tokens = `"limit":{"algorithm":"fixed_window","count":100,"period":"1m"}`

// The case, over HTTP: 80 tokens fit, a stream of 50 is charged
// anyway (130 of 100), and the next request is refused until the window
// ends; a probe of n units charges nothing.
var chargeSteps = []chargeStep{
	{0, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":80,"peek":true}`, 200,
		`{"allowed":true,"limit":100,"remaining":100,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=100;t=0`, `"default";q=100;w=60`, ""},
	{0, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":80}`, 200,
		`{"allowed":true,"limit":100,"remaining":20,"retry_after_ms":0,"reset_after_ms":60000,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=20;t=60`, `"default";q=100;w=60`, ""},
	{time.Second, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":50,"name":"tokens"}`, 200,
		`{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":59000,"reset_after_ms":59000,"delay_ms":0,"banned":false,"fallback":false}`,
		`"tokens";r=0;t=59`, `"tokens";q=100;w=60`, "59"},
	{2 * time.Second, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":1}`, 429,
		`{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":58000,"reset_after_ms":58000,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=0;t=58`, `"default";q=100;w=60`, "58"},
	{2 * time.Second, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":1,"peek":true}`, 200,
		`{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":58000,"reset_after_ms":58000,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=0;t=58`, `"default";q=100;w=60`, "58"},
	// A probe above the limit: never, no Retry-After.
	{2 * time.Second, "/v1/throttle", `{"key":"bob",` + tokens + `,"quantity":101,"peek":true}`, 200,
		`{"allowed":false,"limit":100,"remaining":100,"retry_after_ms":-1,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=100;t=0`, `"default";q=100;w=60`, ""},
	// The window's debt ends with it.
	{time.Minute, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":100,"peek":true}`, 200,
		`{"allowed":true,"limit":100,"remaining":100,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=100;t=0`, `"default";q=100;w=60`, ""},

	// Bad input: a clear problem, nothing charged.
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `}`, 422, "httpapi: invalid request: quantity is missing: the units spent", "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":-1}`, 422, "funnel: invalid quantity -1: algo: count, period, delay, ban and quantity must not be negative", "", `"default";q=100;w=60`, ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":1099511627777}`, 422,
		"funnel: invalid quantity 1099511627777: algo: count or count×period is too large", "", `"default";q=100;w=60`, ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":9223372036854775808}`, 400,
		"httpapi: bad JSON: json: cannot unmarshal number 9223372036854775808 into Go struct field ChargeRequest.quantity of type int64", "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":1.5}`, 400,
		"httpapi: bad JSON: json: cannot unmarshal number 1.5 into Go struct field ChargeRequest.quantity of type int64", "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":1,"peek":true}`, 400,
		`httpapi: bad JSON: json: unknown field "peek"`, "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"alice",` + tokens + `,"quantity":1,"Quantity":2}`, 400,
		`httpapi: bad JSON: the fields "quantity" and "Quantity" differ only in case (names are matched whatever their case)`, "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"",` + tokens + `,"quantity":1}`, 422, "httpapi: invalid request: the key is missing", "", "", ""},
	{time.Minute, "/v1/charge", `{"key":"c","limit":{"algorithm":"concurrency","count":1,"period":"1m"},"quantity":1}`, 422,
		"httpapi: invalid request: concurrency limits take leases: POST /v1/acquire", "", "", ""},
	{time.Minute, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":-1,"peek":true}`, 422, "funnel: invalid quantity -1: algo: count, period, delay, ban and quantity must not be negative", "", "", ""},
	{time.Minute, "/v1/throttle", `{"limits":[{"key":"alice",` + tokens + `}],"peek":true}`, 422,
		"httpapi: invalid request: peek takes one limit (key, limit and quantity), not limits", "", "", ""},
	{time.Minute, "/v1/throttle", `{"key":"alice",` + tokens + `,"quantity":100,"peek":true}`, 200,
		`{"allowed":true,"limit":100,"remaining":100,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=100;t=0`, `"default";q=100;w=60`, ""},
}

func runChargeSteps(t *testing.T, a *api) {
	t.Helper()
	var at time.Duration
	for i, s := range chargeSteps {
		a.clock.add(s.at - at)
		at = s.at
		r := a.post(t, s.path, s.body)
		got := strings.TrimSpace(r.body)
		if r.problem != nil {
			got = r.problem.Detail
		}
		if r.status != s.status || got != s.want {
			t.Errorf("step %d %s %s:\n got %d %s\nwant %d %s", i, s.path, s.body, r.status, got, s.status, s.want)
		}
		if rl, pol, ra := r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), r.header.Get("Retry-After"); rl != s.rateLimit || pol != s.policy || ra != s.retry {
			t.Errorf("step %d %s %s: RateLimit %q, RateLimit-Policy %q, Retry-After %q; want %q, %q, %q", i, s.path, s.body, rl, pol, ra, s.rateLimit, s.policy, s.retry)
		}
	}
}

func TestChargeAndPeek(t *testing.T) {
	t.Parallel()
	runChargeSteps(t, newAPI(t, httpapi.Options{}))
}

func TestChargeAndPeekRedis(t *testing.T) {
	t.Parallel()
	runChargeSteps(t, newRedisAPI(t, redistest.StartServer(t)))
}

// A store that cannot record a charge answers 503 with the policy and no
// RateLimit field, under either fail mode: a charge is never a fallback. A
// probe is answered as a peek is: a fallback.
func TestChargeStoreDown(t *testing.T) {
	t.Parallel()
	for _, fail := range []funnel.FailMode{funnel.FailClosed, funnel.FailOpen} {
		a := serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{Fail: fail})
		r := a.post(t, "/v1/charge", `{"key":"alice",`+tokens+`,"quantity":50}`)
		if r.status != 503 || r.problem == nil || r.problem.Detail != "the store is unavailable" ||
			r.header.Get("RateLimit-Policy") != `"default";q=100;w=60` || r.header.Get("RateLimit") != "" {
			t.Errorf("%v: charge: %d %s %v", fail, r.status, r.body, r.header)
		}
		r = a.post(t, "/v1/throttle", `{"key":"alice",`+tokens+`,"quantity":50,"peek":true}`)
		wantStatus := map[funnel.FailMode]int{funnel.FailClosed: 503, funnel.FailOpen: 200}[fail]
		if r.status != wantStatus || !strings.Contains(r.body, `"fallback":true`) {
			t.Errorf("%v: peek: %d %s", fail, r.status, r.body)
		}
	}
}
