package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/redistest"
)

// reserveStep is one request at an offset from the clock's start, as a
// chargeStep. An admitted reserve's id is kept under save, and "<save>"
// stands for it in the later bodies and in the answers.
type reserveStep struct {
	at                       time.Duration
	path, body               string
	save                     string
	status                   int
	want                     string // the body, or the problem's detail
	rateLimit, policy, retry string
}

// llm is a budget of 100 tokens a minute on a funnel: one token every
// 600 ms, 100 at once.
const llm = `"limit":{"count":100,"period":"1m"}`

// An LLM call reserves its max_tokens and settles the tokens it used:
// below the estimate the rest is given back, above it the difference is
// charged into debt; a second settle changes nothing; an unknown, another
// key's or an expired reservation is 404.
var reserveSteps = []reserveStep{
	{0, "/v1/reserve", `{"key":"alice",` + llm + `,"quantity":40}`, "A", 200,
		`{"allowed":true,"limit":100,"remaining":60,"retry_after_ms":0,"reset_after_ms":24000,"delay_ms":0,"banned":false,"fallback":false,"reservation_id":"<A>"}`,
		`"default";r=60;t=24`, `"default";q=100;w=60`, ""},
	{0, "/v1/settle", `{"key":"alice","reservation_id":"<A>","actual":10}`, "", 200,
		`{"allowed":true,"limit":100,"remaining":90,"retry_after_ms":0,"reset_after_ms":6000,"delay_ms":0,"banned":false,"fallback":false,"estimate":40,"actual":10,"again":false}`,
		`"default";r=90;t=6`, "", ""},
	{0, "/v1/settle", `{"key":"alice","reservation_id":"<A>","actual":99,"name":"tokens"}`, "", 200,
		`{"allowed":true,"limit":100,"remaining":90,"retry_after_ms":0,"reset_after_ms":6000,"delay_ms":0,"banned":false,"fallback":false,"estimate":40,"actual":10,"again":true}`,
		`"tokens";r=90;t=6`, "", ""},
	{0, "/v1/reserve", `{"key":"alice",` + llm + `,"quantity":60,"ttl":"2m","name":"tokens"}`, "B", 200,
		`{"allowed":true,"limit":100,"remaining":30,"retry_after_ms":0,"reset_after_ms":42000,"delay_ms":0,"banned":false,"fallback":false,"reservation_id":"<B>"}`,
		`"tokens";r=30;t=42`, `"tokens";q=100;w=60`, ""},
	// 150 used of 60 reserved: 90 more, 20 over the limit; the key is
	// refused until its TAT (96 s) is within the tolerance (59.4 s) of a
	// token's interval: 36 s.
	{0, "/v1/settle", `{"key":"alice","reservation_id":"<B>","actual":150}`, "", 200,
		`{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":36000,"reset_after_ms":96000,"delay_ms":0,"banned":false,"fallback":false,"estimate":60,"actual":150,"again":false}`,
		`"default";r=0;t=36`, "", "36"},
	{time.Second, "/v1/reserve", `{"key":"alice",` + llm + `,"quantity":1}`, "", 429,
		`{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":35600,"reset_after_ms":95000,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=0;t=36`, `"default";q=100;w=60`, "36"},
	{time.Second, "/v1/settle", `{"key":"alice","reservation_id":"nosuch","actual":1}`, "", 404,
		`funnel: unknown or expired reservation: "nosuch" of key "alice"`, "", "", ""},
	{time.Second, "/v1/settle", `{"key":"bob","reservation_id":"<A>","actual":1}`, "", 404,
		`funnel: unknown or expired reservation: "<A>" of key "bob"`, "", "", ""},
	{time.Second, "/v1/reserve", `{"key":"carol",` + llm + `,"quantity":1,"ttl":"1s"}`, "C", 200,
		`{"allowed":true,"limit":100,"remaining":99,"retry_after_ms":0,"reset_after_ms":600,"delay_ms":0,"banned":false,"fallback":false,"reservation_id":"<C>"}`,
		`"default";r=99;t=1`, `"default";q=100;w=60`, ""},
	{3 * time.Second, "/v1/settle", `{"key":"carol","reservation_id":"<C>","actual":1}`, "", 404,
		`funnel: unknown or expired reservation: "<C>" of key "carol"`, "", "", ""},

	// Bad input: a clear problem, nothing taken.
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `}`, "", 422, "httpapi: invalid request: quantity is missing: the estimate reserved, at least 1", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":0}`, "", 422, "httpapi: invalid request: quantity 0: the estimate reserved is at least 1", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":-1}`, "", 422, "httpapi: invalid request: quantity -1: the estimate reserved is at least 1", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":9223372036854775807}`, "", 422,
		"funnel: invalid quantity 9223372036854775807: gcra: value overflows int64 nanoseconds", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl":"0s"}`, "", 422, `httpapi: invalid request: ttl: "0s" is not from 1ms to 24h0m0s`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl":"-1m"}`, "", 422, `httpapi: invalid request: ttl: "-1m" is not from 1ms to 24h0m0s`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl":"24h0m0.001s"}`, "", 422, `httpapi: invalid request: ttl: "24h0m0.001s" is not from 1ms to 24h0m0s`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl":"soon"}`, "", 422, `httpapi: invalid request: ttl: "soon" is not a duration such as "1s" or "1m30s"`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl":60000}`, "", 400,
		"httpapi: bad JSON: json: cannot unmarshal number into Go struct field ReserveRequest.ttl of type string", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"ttl_ms":60000}`, "", 400, `httpapi: bad JSON: json: unknown field "ttl_ms"`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"peek":true}`, "", 400, `httpapi: bad JSON: json: unknown field "peek"`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1,"TTL":"1s","ttl":"2s"}`, "", 400,
		`httpapi: bad JSON: the fields "TTL" and "ttl" differ only in case (names are matched whatever their case)`, "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"",` + llm + `,"quantity":1}`, "", 422, "httpapi: invalid request: the key is missing", "", "", ""},
	{time.Minute, "/v1/reserve", `{"key":"c","limit":{"algorithm":"concurrency","count":1,"period":"1m"},"quantity":1}`, "", 422,
		"httpapi: invalid request: concurrency limits take leases: POST /v1/acquire", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","actual":1}`, "", 422, "httpapi: invalid request: reservation_id is missing: the id that POST /v1/reserve answered", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"x"}`, "", 422, "httpapi: invalid request: actual is missing: the units spent", "", "", ""},
	{time.Minute, "/v1/settle", `{"reservation_id":"x","actual":1}`, "", 422, "httpapi: invalid request: the key is missing", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"x","actual":-1}`, "", 422,
		"funnel: invalid quantity -1: algo: count, period, delay, ban and quantity must not be negative", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"x","actual":1.5}`, "", 400,
		"httpapi: bad JSON: json: cannot unmarshal number 1.5 into Go struct field SettleRequest.actual of type int64", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"x","actual":1,"Actual":2}`, "", 400,
		`httpapi: bad JSON: the fields "actual" and "Actual" differ only in case (names are matched whatever their case)`, "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"x","actual":1,` + llm + `}`, "", 400, `httpapi: bad JSON: json: unknown field "limit"`, "", "", ""},
	{time.Minute, "/v1/throttle", `{"key":"dave",` + llm + `,"quantity":100,"peek":true}`, "", 200,
		`{"allowed":true,"limit":100,"remaining":100,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false}`,
		`"default";r=100;t=0`, `"default";q=100;w=60`, ""},
	// An actual whose debt does not fit is refused, and the reservation
	// can still be settled.
	{time.Minute, "/v1/reserve", `{"key":"dave",` + llm + `,"quantity":1}`, "D", 200,
		`{"allowed":true,"limit":100,"remaining":99,"retry_after_ms":0,"reset_after_ms":600,"delay_ms":0,"banned":false,"fallback":false,"reservation_id":"<D>"}`,
		`"default";r=99;t=1`, `"default";q=100;w=60`, ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"<D>","actual":9223372036854775807}`, "", 422,
		"funnel: invalid quantity 9223372036854775807: gcra: value overflows int64 nanoseconds", "", "", ""},
	{time.Minute, "/v1/settle", `{"key":"dave","reservation_id":"<D>","actual":0}`, "", 200,
		`{"allowed":true,"limit":100,"remaining":100,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":false,"estimate":1,"actual":0,"again":false}`,
		`"default";r=100;t=0`, "", ""},
}

func runReserveSteps(t *testing.T, a *api) {
	t.Helper()
	var at time.Duration
	ids := map[string]string{}
	subst := func(s string) string {
		for name, id := range ids {
			s = strings.ReplaceAll(s, "<"+name+">", id)
		}
		return s
	}
	for i, s := range reserveSteps {
		a.clock.add(s.at - at)
		at = s.at
		r := a.post(t, s.path, subst(s.body))
		got := strings.TrimSpace(r.body)
		if r.problem != nil {
			got = r.problem.Detail
		}
		if s.save != "" {
			var d httpapi.Decision
			if err := json.Unmarshal([]byte(got), &d); err != nil || d.ReservationID == "" {
				t.Fatalf("step %d %s %s: no reservation id in %d %s", i, s.path, s.body, r.status, r.body)
			}
			ids[s.save] = d.ReservationID
		}
		if want := subst(s.want); r.status != s.status || got != want {
			t.Errorf("step %d %s %s:\n got %d %s\nwant %d %s", i, s.path, s.body, r.status, got, s.status, want)
		}
		if rl, pol, ra := r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), r.header.Get("Retry-After"); rl != s.rateLimit || pol != s.policy || ra != s.retry {
			t.Errorf("step %d %s %s: RateLimit %q, RateLimit-Policy %q, Retry-After %q; want %q, %q, %q", i, s.path, s.body, rl, pol, ra, s.rateLimit, s.policy, s.retry)
		}
	}
}

func TestReserveAndSettle(t *testing.T) {
	t.Parallel()
	runReserveSteps(t, newAPI(t, httpapi.Options{}))
}

// A store that cannot reserve answers the fallback, without a reservation;
// one that cannot settle answers 503 under either fail mode: a settle is
// never a fallback.
func TestReserveStoreDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fail   funnel.FailMode
		status int
		body   string
	}{
		{funnel.FailClosed, 503, `{"allowed":false,"limit":100,"remaining":0,"retry_after_ms":1000,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}`},
		{funnel.FailOpen, 200, `{"allowed":true,"limit":100,"remaining":0,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}`},
	} {
		a := serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{Fail: tc.fail})
		r := a.post(t, "/v1/reserve", `{"key":"alice",`+llm+`,"quantity":40}`)
		if r.status != tc.status || strings.TrimSpace(r.body) != tc.body || r.header.Get("RateLimit") != "" {
			t.Errorf("%v: reserve: %d %s %v\nwant %d %s", tc.fail, r.status, r.body, r.header, tc.status, tc.body)
		}
		r = a.post(t, "/v1/settle", `{"key":"alice","reservation_id":"x","actual":50}`)
		if r.status != 503 || r.problem == nil || r.problem.Detail != "the store is unavailable" || r.header.Get("RateLimit") != "" {
			t.Errorf("%v: settle: %d %s %v", tc.fail, r.status, r.body, r.header)
		}
	}
}

func TestReserveAndSettleRedis(t *testing.T) {
	t.Parallel()
	runReserveSteps(t, newRedisAPI(t, redistest.StartServer(t)))
}
