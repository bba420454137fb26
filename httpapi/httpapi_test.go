package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/gcra"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/memstore"
)

// start is the fake clock's first instant.
var start = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(start.UnixNano())
	return c
}
func (c *clock) now() int64          { return c.ns.Load() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// api serves the HTTP API over a memstore with a fake clock on 127.0.0.1:0.
type api struct {
	*httptest.Server
	clock *clock
	lim   *funnel.Limiter
}

func newAPI(t *testing.T, opts httpapi.Options) *api {
	t.Helper()
	c := newClock()
	st := memstore.New(memstore.Options{Now: c.now})
	t.Cleanup(func() { st.Close() })
	return serveAPI(t, funnel.New(st), c, opts)
}

func serveAPI(t *testing.T, lim *funnel.Limiter, c *clock, opts httpapi.Options) *api {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	srv := httptest.NewServer(httpapi.New(lim, opts))
	t.Cleanup(srv.Close)
	return &api{Server: srv, clock: c, lim: lim}
}

type reply struct {
	status  int
	header  http.Header
	body    string
	problem *httpreply.Problem
}

// do sends a request with a real client; body is JSON.
func (a *api) do(t *testing.T, method, path, body string, headers ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := a.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		r.problem = new(httpreply.Problem)
		dec := json.NewDecoder(strings.NewReader(r.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(r.problem); err != nil {
			t.Fatalf("problem %q: %v", b, err)
		}
		if r.problem.Status != r.status {
			t.Errorf("problem status %d in a %d response", r.problem.Status, r.status)
		}
		if r.problem.Title == "" || r.problem.Type == "" {
			t.Errorf("problem without type or title: %s", b)
		}
	}
	return r
}

func (a *api) post(t *testing.T, path, body string) reply { return a.do(t, "POST", path, body) }

func TestThrottle(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	body := `{"key":"user:42","limit":{"count":30,"period":"1m","burst":2},"name":"per-user"}`
	wants := []string{
		`{"allowed":true,"limit":3,"remaining":2,"retry_after_ms":0,"reset_after_ms":2000,"delay_ms":0,"banned":false,"fallback":false}`,
		`{"allowed":true,"limit":3,"remaining":1,"retry_after_ms":0,"reset_after_ms":4000,"delay_ms":0,"banned":false,"fallback":false}`,
		`{"allowed":true,"limit":3,"remaining":0,"retry_after_ms":0,"reset_after_ms":6000,"delay_ms":0,"banned":false,"fallback":false}`,
	}
	for i, want := range wants {
		r := a.post(t, "/v1/throttle", body)
		if r.status != 200 || strings.TrimSpace(r.body) != want {
			t.Fatalf("request %d: %d %s\nwant %s", i, r.status, r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if got := r.header.Get("RateLimit-Policy"); got != `"per-user";q=3;w=6` {
			t.Errorf("RateLimit-Policy %s", got)
		}
		if got, want := r.header.Get("RateLimit"), fmt.Sprintf(`"per-user";r=%d;t=%d`, 2-i, 2*(i+1)); got != want {
			t.Errorf("RateLimit %s, want %s", got, want)
		}
	}
	r := a.post(t, "/v1/throttle", body)
	want := `{"allowed":false,"limit":3,"remaining":0,"retry_after_ms":2000,"reset_after_ms":6000,"delay_ms":0,"banned":false,"fallback":false}`
	if r.status != 429 || strings.TrimSpace(r.body) != want {
		t.Fatalf("refused: %d %s", r.status, r.body)
	}
	if r.header.Get("Retry-After") != "2" || r.header.Get("RateLimit") != `"per-user";r=0;t=2` {
		t.Errorf("refused headers: %v", r.header)
	}

	a.clock.add(1500 * time.Millisecond) // retry_after rounds up
	r = a.post(t, "/v1/throttle", body)
	if r.status != 429 || !strings.Contains(r.body, `"retry_after_ms":500`) || r.header.Get("Retry-After") != "1" {
		t.Fatalf("after 1.5 s: %d %s %v", r.status, r.body, r.header)
	}
	a.clock.add(500 * time.Millisecond)
	if r := a.post(t, "/v1/throttle", body); r.status != 200 {
		t.Fatalf("after 2 s: %d %s", r.status, r.body)
	}
}

func TestThrottleDefaults(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	// No burst: count-1, so 10 at once. No quantity: 1. No name: "default".
	r := a.post(t, "/v1/throttle", `{"key":"k","limit":{"count":10,"period":"1s"}}`)
	if r.status != 200 || !strings.Contains(r.body, `"limit":10,"remaining":9`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r.header.Get("RateLimit-Policy") != `"default";q=10;w=1` {
		t.Errorf("%v", r.header)
	}
	// Quantity 0 peeks.
	r = a.post(t, "/v1/throttle", `{"key":"k","limit":{"count":10,"period":"1s"},"quantity":0}`)
	if r.status != 200 || !strings.Contains(r.body, `"remaining":9`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	// More than the limit at once: never.
	r = a.post(t, "/v1/throttle", `{"key":"k","limit":{"count":10,"period":"1s"},"quantity":11}`)
	if r.status != 429 || !strings.Contains(r.body, `"retry_after_ms":-1`) || r.header.Get("Retry-After") != "" {
		t.Fatalf("%d %s %v", r.status, r.body, r.header)
	}
}

func TestBadInput(t *testing.T) {
	a := newAPI(t, httpapi.Options{MaxBody: 512, MaxLimits: 2})
	lim := `"limit":{"count":10,"period":"1s"}`
	cases := []struct {
		name, body string
		status     int
		detail     string // a part of the problem's detail
	}{
		{"not JSON", `{"key":`, 400, "unexpected EOF"},
		{"empty", ``, 400, "the body is empty"},
		{"unknown field", `{"key":"k",` + lim + `,"quantity":1,"extra":1}`, 400, `unknown field "extra"`},
		{"two values", `{"key":"k",` + lim + `} {}`, 400, "more than one JSON value"},
		{"wrong type", `{"key":"k","limit":{"count":"10","period":"1s"}}`, 400, "cannot unmarshal"},
		{"no key", `{` + lim + `}`, 422, "the key is missing"},
		{"no limit", `{"key":"k"}`, 422, "the limit is missing"},
		{"bad period", `{"key":"k","limit":{"count":10,"period":"1 second"}}`, 422, `period: "1 second" is not a duration`},
		{"zero count", `{"key":"k","limit":{"count":0,"period":"1s"}}`, 422, "invalid limit"},
		{"window under 1ms", `{"key":"k","limit":{"algorithm":"fixed_window","count":1,"period":"100us"}}`, 422, "invalid limit"},
		{"unknown algorithm", `{"key":"k","limit":{"algorithm":"token_bucket","count":1,"period":"1s"}}`, 422, `unknown algorithm "token_bucket"`},
		{"unknown calendar", `{"key":"k","limit":{"algorithm":"fixed_window","count":1,"calendar":"year"}}`, 422, `calendar: unknown calendar "year" (want day, week or month)`},
		{"unknown zone", `{"key":"k","limit":{"algorithm":"fixed_window","count":1,"calendar":"day","time_zone":"Mars/Olympus"}}`, 422, "unknown time zone"},
		{"delay and nodelay", `{"key":"k","limit":{"algorithm":"leaky_bucket","count":1,"period":"1s","delay":1,"nodelay":true}}`, 422, "exclude each other"},
		{"negative quantity", `{"key":"k",` + lim + `,"quantity":-1}`, 422, "invalid quantity"},
		{"bad name", `{"key":"k",` + lim + `,"name":"tab\there"}`, 422, "policy name"},
		{"concurrency", `{"key":"k","limit":{"algorithm":"concurrency","count":1,"period":"1s"}}`, 422, "/v1/acquire"},
		{"both", `{"key":"k",` + lim + `,"limits":[{"key":"a",` + lim + `}]}`, 422, "not both"},
		{"no limits", `{"limits":[]}`, 422, "1 to 2 entries"},
		{"too many limits", `{"limits":[{"key":"a",` + lim + `},{"key":"b",` + lim + `},{"key":"c",` + lim + `}]}`, 422, "1 to 2 entries"},
		{"bad entry", `{"limits":[{"key":"a",` + lim + `},{"key":"",` + lim + `}]}`, 422, "limits[1]: "},
		// 9e18 × 100 ms does not fit in int64 nanoseconds: a bad quantity,
		// for one limit as for several.
		{"huge quantity", `{"key":"k",` + lim + `,"quantity":9000000000000000000}`, 422, "overflows"},
		{"huge quantities", `{"limits":[{"key":"a",` + lim + `,"quantity":9000000000000000000},{"key":"b",` + lim + `}]}`, 422, "overflows"},
		{"too large", `{"key":"` + strings.Repeat("k", 600) + `",` + lim + `}`, 413, "larger than 512 bytes"},
		// A body that means two things is refused: encoding/json alone
		// would keep the last of two names equal up to case, and merge
		// strings that are not UTF-8 into U+FFFD.
		{"duplicate field", `{"key":"a",` + lim + `,"key":"b"}`, 400, `the field "key" comes twice`},
		{"case variant", `{"key":"a",` + lim + `,"Key":"b"}`, 400, `the fields "key" and "Key" differ only in case`},
		{"escaped variant", `{"key":"a",` + lim + `,"k\u0065y":"b"}`, 400, `the field "key" comes twice`},
		{"nested case variant", `{"key":"a","limit":{"count":1,"period":"1s","COUNT":1000000}}`, 400, `"count" and "COUNT"`},
		{"case variant in limits", `{"limits":[{"key":"a",` + lim + `,"KEY":"b"}]}`, 400, `"key" and "KEY"`},
		{"not UTF-8", "{\"key\":\"u\xff\"," + lim + "}", 400, "not valid UTF-8"},
		{"lone surrogate", `{"key":"u\udcff",` + lim + `}`, 400, "surrogate pair alone"},
		{"first half alone", `{"key":"u\ud800x",` + lim + `}`, 400, "surrogate pair alone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.post(t, "/v1/throttle", c.body)
			if r.status != c.status || r.problem == nil {
				t.Fatalf("%d %s, want %d", r.status, r.body, c.status)
			}
			if r.problem.Type != "about:blank" || r.problem.Title != http.StatusText(c.status) {
				t.Errorf("problem %+v", r.problem)
			}
			if !strings.Contains(r.problem.Detail, c.detail) {
				t.Errorf("detail %q, want it to hold %q", r.problem.Detail, c.detail)
			}
		})
	}

	r := a.do(t, "POST", "/v1/throttle", `key=k`, "Content-Type", "application/x-www-form-urlencoded")
	if r.status != 415 || r.problem == nil {
		t.Errorf("form body: %d %s", r.status, r.body)
	}
}

func TestRouting(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	r := a.do(t, "GET", "/v1/throttle", "")
	if r.status != 405 || r.problem == nil || r.header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/throttle: %d %v %s", r.status, r.header, r.body)
	}
	r = a.do(t, "PUT", "/v1/keys/k", "")
	if r.status != 405 || r.problem == nil || !strings.Contains(r.header.Get("Allow"), "DELETE") {
		t.Errorf("PUT /v1/keys/k: %d %v %s", r.status, r.header, r.body)
	}
	r = a.do(t, "GET", "/v2/nothing", "")
	if r.status != 404 || r.problem == nil || r.problem.Detail != "no endpoint /v2/nothing" {
		t.Errorf("unknown path: %d %s", r.status, r.body)
	}
	// Without Options.Metrics, /metrics does not exist.
	if r := a.do(t, "GET", "/metrics", ""); r.status != 404 {
		t.Errorf("/metrics: %d", r.status)
	}
}

func TestPeekAndReset(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	for range 3 {
		a.post(t, "/v1/throttle", `{"key":"user/1","limit":{"count":10,"period":"1s"}}`)
	}
	// A key with a slash, escaped or not.
	for _, path := range []string{"/v1/keys/user%2F1", "/v1/keys/user/1"} {
		r := a.do(t, "GET", path+"?count=10&period=1s&name=api", "")
		if r.status != 200 || !strings.Contains(r.body, `"allowed":true,"limit":10,"remaining":7,"retry_after_ms":0,"reset_after_ms":300`) {
			t.Fatalf("peek %s: %d %s", path, r.status, r.body)
		}
		if r.header.Get("RateLimit") != `"api";r=7;t=1` {
			t.Errorf("peek RateLimit %s", r.header.Get("RateLimit"))
		}
	}
	r := a.do(t, "GET", "/v1/keys/user%2F1?count=10&period=1s&colour=blue", "")
	if r.status != 422 || r.problem.Detail != "httpapi: invalid request: unknown query parameter colour" {
		t.Errorf("peek with an unknown parameter: %d %s", r.status, r.body)
	}
	r = a.do(t, "GET", "/v1/keys/user%2F1", "")
	if r.status != 422 || !strings.Contains(r.problem.Detail, "query parameter count is missing") {
		t.Errorf("peek without a limit: %d %s", r.status, r.body)
	}
	r = a.do(t, "GET", "/v1/keys/user%2F1?count=10", "")
	if r.status != 422 || !strings.Contains(r.problem.Detail, "query parameter period is missing") {
		t.Errorf("peek without a period: %d %s", r.status, r.body)
	}
	r = a.do(t, "GET", "/v1/keys/daily?algorithm=fixed_window&count=10&calendar=day", "")
	if r.status != 200 {
		t.Errorf("peek of a calendar window, which has no period: %d %s", r.status, r.body)
	}

	r = a.do(t, "DELETE", "/v1/keys/user%2F1", "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"existed":true}` {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}
	r = a.do(t, "DELETE", "/v1/keys/user%2F1", "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"existed":false}` {
		t.Fatalf("reset again: %d %s", r.status, r.body)
	}
	// Escaped, "//" and ".." are part of the key.
	a.post(t, "/v1/throttle", `{"key":"a/../b//c","limit":{"count":10,"period":"1s"}}`)
	r = a.do(t, "DELETE", "/v1/keys/"+url.PathEscape("a/../b//c"), "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"existed":true}` {
		t.Fatalf("reset of an escaped key: %d %s", r.status, r.body)
	}
	if r := a.do(t, "DELETE", "/v1/keys/", ""); r.status != 422 {
		t.Errorf("reset of no key: %d %s", r.status, r.body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	if r := a.do(t, "GET", "/healthz", ""); r.status != 200 || r.body != "ok\n" {
		t.Errorf("healthz: %d %q", r.status, r.body)
	}
	if r := a.do(t, "GET", "/readyz", ""); r.status != 200 || r.body != "ready\n" {
		t.Errorf("readyz: %d %q", r.status, r.body)
	}

	var down atomic.Bool
	a = newAPI(t, httpapi.Options{Ready: func(context.Context) error {
		if down.Load() {
			return errors.New("dial tcp 10.1.2.3:6379: connection refused")
		}
		return nil
	}})
	if r := a.do(t, "GET", "/readyz", ""); r.status != 200 {
		t.Errorf("readyz: %d", r.status)
	}
	down.Store(true)
	r := a.do(t, "GET", "/readyz", "")
	if r.status != 503 || r.problem == nil || strings.Contains(r.body, "10.1.2.3") {
		t.Errorf("readyz when down: %d %s", r.status, r.body)
	}
	if r := a.do(t, "GET", "/healthz", ""); r.status != 200 {
		t.Errorf("healthz when the store is down: %d", r.status)
	}

	// The default check asks the store itself.
	st := &fakeStore{ttl: func() error { return errDown }}
	a = serveAPI(t, funnel.New(st), newClock(), httpapi.Options{})
	if r := a.do(t, "GET", "/readyz", ""); r.status != 503 {
		t.Errorf("readyz over a store that is down: %d", r.status)
	}
}

func TestMetricsMounted(t *testing.T) {
	m := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "funnel_up 1\n") })
	a := newAPI(t, httpapi.Options{Metrics: m})
	if r := a.do(t, "GET", "/metrics", ""); r.status != 200 || r.body != "funnel_up 1\n" {
		t.Errorf("/metrics: %d %q", r.status, r.body)
	}
}

// fakeStore is a store (and Executor) whose answers the test chooses.
type fakeStore struct {
	throttle func() (funnel.Result, error)
	do       func(ops []funnel.Op, res []funnel.Result) error
	ttl      func() error
}

func (f *fakeStore) Throttle(context.Context, string, gcra.Params, int64) (funnel.Result, error) {
	return f.throttle()
}
func (f *fakeStore) Reset(context.Context, string) (bool, error) { return false, errDown }
func (f *fakeStore) TTL(context.Context, string) (time.Duration, bool, error) {
	return 0, false, f.ttl()
}
func (f *fakeStore) Do(_ context.Context, ops []funnel.Op, res []funnel.Result) error {
	return f.do(ops, res)
}
func (f *fakeStore) Reserve(context.Context, string, funnel.Checked, int64, string, time.Duration) (funnel.Result, error) {
	return funnel.Result{}, errDown
}
func (f *fakeStore) Settle(context.Context, string, string, int64) (funnel.Settlement, error) {
	return funnel.Settlement{}, errDown
}
func (f *fakeStore) Bans(context.Context) ([]funnel.Ban, error)  { return nil, errDown }
func (f *fakeStore) Unban(context.Context, string) (bool, error) { return false, errDown }

var errDown = fmt.Errorf("redisstore: dial tcp 10.1.2.3:6379: connection refused: %w", funnel.ErrUnavailable)

func downStore() *fakeStore {
	return &fakeStore{
		throttle: func() (funnel.Result, error) { return funnel.Result{}, errDown },
		do:       func([]funnel.Op, []funnel.Result) error { return errDown },
		ttl:      func() error { return errDown },
	}
}

func TestStoreDown(t *testing.T) {
	single := `{"key":"k","limit":{"count":10,"period":"1s"}}`
	multi := `{"limits":[{"key":"a","limit":{"count":10,"period":"1s"}},{"key":"b","limit":{"algorithm":"fixed_window","count":10,"period":"1s"}}]}`
	acquire := `{"key":"k","limit":{"count":2,"period":"30s"}}`

	// Calls that carry no decision: 503, and the store's error is not
	// sent, whatever the fail mode.
	for _, fail := range []funnel.FailMode{funnel.FailClosed, funnel.FailOpen} {
		a := serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{Fail: fail})
		for _, c := range []struct{ method, path, body string }{
			{"POST", "/v1/release", `{"key":"k","lease":"x"}`}, {"POST", "/v1/refund", single},
			{"DELETE", "/v1/keys/k", ""}, {"GET", "/v1/bans", ""}, {"DELETE", "/v1/bans/k", ""},
		} {
			r := a.do(t, c.method, c.path, c.body)
			if r.status != 503 || r.problem == nil || r.problem.Detail != "the store is unavailable" || strings.Contains(r.body, "10.1.2.3") {
				t.Errorf("%v: %s %s: %d %s", fail, c.method, c.path, r.status, r.body)
			}
		}
	}
	// The default, funnel.FailClosed: decisions are fail-closed fallbacks,
	// 503 with the decision (it was a 503 problem before one fail mode
	// served every edge), the store's error not sent.
	a := serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{})
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/throttle", single}, {"POST", "/v1/throttle", multi}, {"POST", "/v1/acquire", acquire},
		{"GET", "/v1/keys/k?count=1&period=1s", ""},
	} {
		r := a.do(t, c.method, c.path, c.body)
		if r.status != 503 || r.problem != nil || !strings.Contains(r.body, `"fallback":true`) || r.header.Get("Retry-After") != "1" || strings.Contains(r.body, "10.1.2.3") {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}

	var mu sync.Mutex
	var seen []string
	observe := func(r funnel.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%v/%v/%v", r.Allowed, r.Fallback, err != nil))
	}
	a = serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{Fail: funnel.FailOpen, Observe: observe})
	r := a.post(t, "/v1/throttle", single)
	if r.status != 200 || strings.TrimSpace(r.body) != `{"allowed":true,"limit":10,"remaining":0,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}` {
		t.Errorf("fail open: %d %s", r.status, r.body)
	}
	if r.header.Get("RateLimit-Policy") != `"default";q=10;w=1` || r.header.Get("RateLimit") != "" {
		t.Errorf("fail open headers: %v", r.header)
	}
	r = a.post(t, "/v1/throttle", multi)
	if r.status != 200 || !strings.HasPrefix(r.body, `{"allowed":true,"refused":-1,"retry_after_ms":0,"fallback":true,`) {
		t.Errorf("fail open, several: %d %s", r.status, r.body)
	}

	// FailClosed: not a refusal by the limit (429) but 503, retry soon.
	a = serveAPI(t, funnel.New(downStore()), newClock(), httpapi.Options{Fail: funnel.FailClosed, Observe: observe})
	r = a.post(t, "/v1/throttle", single)
	if r.status != 503 || strings.TrimSpace(r.body) != `{"allowed":false,"limit":10,"remaining":0,"retry_after_ms":1000,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}` ||
		r.header.Get("Retry-After") != "1" || r.header.Get("Content-Type") != "application/json" || r.header.Get("RateLimit") != "" {
		t.Errorf("fail closed: %d %s %v", r.status, r.body, r.header)
	}
	r = a.post(t, "/v1/throttle", multi)
	if r.status != 503 || !strings.HasPrefix(r.body, `{"allowed":false,"refused":0,"retry_after_ms":1000,"fallback":true,`) || r.header.Get("Retry-After") != "1" {
		t.Errorf("fail closed, several: %d %s %v", r.status, r.body, r.header)
	}
	r = a.post(t, "/v1/acquire", acquire)
	if r.status != 503 || !strings.Contains(r.body, `"retry_after_ms":1000`) || !strings.Contains(r.body, `"fallback":true`) || r.header.Get("Retry-After") != "1" {
		t.Errorf("fail closed, acquire: %d %s %v", r.status, r.body, r.header)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "[true/true/false true/true/false true/true/false false/true/false false/true/false false/true/false false/true/false]"; fmt.Sprint(seen) != want {
		t.Errorf("observed %v, want %s", seen, want)
	}
}

// fallbackStore answers every decision as a Redis store that cannot reach
// Redis does: a Fallback result, allowed if open, with no error.
func fallbackStore(open bool) *fakeStore {
	return &fakeStore{
		throttle: func() (funnel.Result, error) {
			return funnel.Result{Fallback: true, Allowed: open, Limit: 10}, nil
		},
		do: func(ops []funnel.Op, res []funnel.Result) error {
			for i := range ops {
				res[i] = funnel.Result{Fallback: true, Allowed: open, Limit: 10}
			}
			return nil
		},
		ttl: func() error { return errDown },
	}
}

// TestStoreFallback: a store that answers a fallback itself is answered
// 200 when it fails open and 503 with Retry-After when it fails closed, on
// every endpoint that answers a decision; a fail-closed fallback never
// looks like a refusal by the limit (429 without a time to retry).
func TestStoreFallback(t *testing.T) {
	lim := `"limit":{"count":10,"period":"1s"}`
	cases := []struct{ name, method, path, body string }{
		{"gcra", "POST", "/v1/throttle", `{"key":"k",` + lim + `}`},
		{"family", "POST", "/v1/throttle", `{"key":"k","limit":{"algorithm":"sliding_window","count":10,"period":"1s"}}`},
		{"several", "POST", "/v1/throttle", `{"limits":[{"key":"a",` + lim + `},{"key":"b","limit":{"algorithm":"fixed_window","count":10,"period":"1s"}}]}`},
		{"acquire", "POST", "/v1/acquire", `{"key":"k","limit":{"count":10,"period":"30s"}}`},
		{"peek", "GET", "/v1/keys/k?count=10&period=1s", ""},
	}
	const (
		opened = `{"allowed":true,"limit":10,"remaining":0,"retry_after_ms":0,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}`
		closed = `{"allowed":false,"limit":10,"remaining":0,"retry_after_ms":1000,"reset_after_ms":0,"delay_ms":0,"banned":false,"fallback":true}`
	)
	for _, open := range []bool{true, false} {
		a := serveAPI(t, funnel.New(fallbackStore(open)), newClock(), httpapi.Options{})
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/open=%v", c.name, open), func(t *testing.T) {
				r := a.do(t, c.method, c.path, c.body)
				status, retryAfter, want := 200, "", opened
				if !open {
					status, retryAfter, want = 503, "1", closed
				}
				if c.name == "several" && open {
					want = `{"allowed":true,"refused":-1,"retry_after_ms":0,"fallback":true,"results":[` + opened + `,` + opened + `]}`
				} else if c.name == "several" {
					want = `{"allowed":false,"refused":0,"retry_after_ms":1000,"fallback":true,"results":[` + closed + `,` + closed + `]}`
				}
				body := strings.TrimSpace(r.body)
				if c.name == "acquire" && open {
					// A lease the store could not record: its id is random.
					var d httpapi.Decision
					if err := json.Unmarshal([]byte(body), &d); err != nil || d.Lease == "" {
						t.Errorf("lease: %s %v", body, err)
					}
					body = strings.Replace(body, `,"lease":"`+d.Lease+`"`, "", 1)
				}
				if r.status != status || body != want {
					t.Errorf("%d %s\nwant %d %s", r.status, r.body, status, want)
				}
				if got := r.header.Get("Retry-After"); got != retryAfter {
					t.Errorf("Retry-After %q, want %q", got, retryAfter)
				}
				if r.header.Get("Content-Type") != "application/json" || r.header.Get("RateLimit-Policy") == "" || r.header.Get("RateLimit") != "" {
					t.Errorf("header %v", r.header)
				}
			})
		}
	}
}

// TestStoreFallbackAndRefusal: a limit that decided and refused makes a
// refusal of several limits a real one (429), even beside a fail-closed
// fallback; it waits for the longer of the two.
func TestStoreFallbackAndRefusal(t *testing.T) {
	st := &fakeStore{do: func(ops []funnel.Op, res []funnel.Result) error {
		res[0] = funnel.Result{Limit: 10, RetryAfter: 30 * time.Second, ResetAfter: time.Minute}
		res[1] = funnel.Result{Fallback: true, Limit: 10}
		return nil
	}}
	a := serveAPI(t, funnel.New(st), newClock(), httpapi.Options{})
	lim := `"limit":{"algorithm":"fixed_window","count":10,"period":"1m"}`
	r := a.post(t, "/v1/throttle", `{"limits":[{"key":"a",`+lim+`},{"key":"b",`+lim+`}]}`)
	if r.status != 429 || !strings.HasPrefix(r.body, `{"allowed":false,"refused":0,"retry_after_ms":30000,"fallback":true,`) || r.header.Get("Retry-After") != "30" {
		t.Errorf("%d %s %v", r.status, r.body, r.header)
	}
}

func TestStoreErrors(t *testing.T) {
	cases := []struct {
		err    error
		status int
		detail string
	}{
		{fmt.Errorf("memstore: %w", funnel.ErrWrongType), 409, "WRONGTYPE"},
		{fmt.Errorf("redisstore: %w", funnel.ErrCrossSlot), 422, "CROSSSLOT"},
		{errors.New("redisstore: ERR unexpected reply from 10.1.2.3"), 500, ""},
	}
	for _, c := range cases {
		st := &fakeStore{do: func([]funnel.Op, []funnel.Result) error { return c.err }}
		a := serveAPI(t, funnel.New(st), newClock(), httpapi.Options{})
		r := a.post(t, "/v1/throttle", `{"key":"k","limit":{"algorithm":"sliding_window","count":10,"period":"1s"}}`)
		if r.status != c.status || r.problem == nil || !strings.Contains(r.problem.Detail, c.detail) || (c.detail == "" && r.problem.Detail != "") {
			t.Errorf("%v: %d %s", c.err, r.status, r.body)
		}
	}
}

// TestClientGoneIsNotAFallback: a request whose client has gone is
// answered 499, on every endpoint that asks the store, never with an empty
// 200; its error is not counted as a fail-open answer.
func TestClientGoneIsNotAFallback(t *testing.T) {
	st := &fakeStore{
		throttle: func() (funnel.Result, error) { return funnel.Result{}, context.Canceled },
		do:       func([]funnel.Op, []funnel.Result) error { return context.Canceled },
	}
	var seen []string
	observe := func(r funnel.Result, err error) {
		seen = append(seen, fmt.Sprintf("%v/%v/%v", r.Allowed, r.Fallback, err != nil))
	}
	h := httpapi.New(funnel.New(st), httpapi.Options{Fail: funnel.FailOpen, Observe: observe, Logger: quiet()})
	single := `{"key":"k","limit":{"count":10,"period":"1s"}}`
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	late, cancel := context.WithDeadline(context.Background(), start)
	defer cancel()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/throttle", single},
		{"POST", "/v1/throttle", `{"limits":[{"key":"a","limit":{"count":10,"period":"1s"}}]}`},
		{"POST", "/v1/acquire", `{"key":"k","limit":{"count":2,"period":"30s"}}`},
		{"POST", "/v1/release", `{"key":"k","lease":"x"}`}, {"POST", "/v1/refund", single},
		{"GET", "/v1/keys/k?count=1&period=1s", ""}, {"DELETE", "/v1/keys/k", ""},
		{"GET", "/v1/bans", ""}, {"DELETE", "/v1/bans/k", ""},
	} {
		for _, ctx := range []context.Context{gone, late} {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req := httptest.NewRequest(c.method, c.path, body).WithContext(ctx)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			want := 499 // the client has gone
			if ctx == late {
				want = 503 // the request's deadline passed
			}
			if rec.Code != want || rec.Header().Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(rec.Body.String(), fmt.Sprintf(`"status":%d`, want)) ||
				rec.Header().Get("RateLimit-Policy") != "" {
				t.Errorf("%s %s, %v: %d %v %s", c.method, c.path, ctx.Err(), rec.Code, rec.Header(), rec.Body)
			}
		}
	}
	// The decisions of throttle (one and several) and acquire, twice each.
	if want := "[false/false/true false/false/true false/false/true false/false/true false/false/true false/false/true]"; fmt.Sprint(seen) != want {
		t.Errorf("observed %v, want %s", seen, want)
	}
}

// TestOneMeaningAccepted: what the strict decoding refuses is only what
// means two things; distinct keys that are valid UTF-8, written raw or
// escaped, stay distinct keys.
func TestOneMeaningAccepted(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	lim := `"limit":{"count":1,"period":"1m","burst":0}`
	for _, key := range []string{`u\ufffd`, "u\u00e9", `u\ud83d\ude00`, `u\\\"\/`} {
		if r := a.post(t, "/v1/throttle", `{"key":"`+key+`",`+lim+`}`); r.status != 200 {
			t.Fatalf("%s: %d %s", key, r.status, r.body)
		}
	}
	// "u\ufffd" was charged above: written raw, it is the same key.
	if r := a.post(t, "/v1/throttle", "{\"key\":\"u\ufffd\","+lim+"}"); r.status != 429 {
		t.Fatalf("U+FFFD written raw: %d %s", r.status, r.body)
	}
}
