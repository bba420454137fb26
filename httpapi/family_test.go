package httpapi_test

// The limiter family through the HTTP API, over the memory store.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
)

func TestThrottleAll(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	body := `{"limits":[
		{"key":"ip:1","limit":{"count":10,"period":"1s"},"name":"per-second"},
		{"key":"user:1","limit":{"algorithm":"fixed_window","count":3,"calendar":"day","time_zone":"Europe/Paris"},"quantity":2}
	]}`
	r := a.post(t, "/v1/throttle", body)
	want := `{"allowed":true,"refused":-1,"retry_after_ms":0,"fallback":false,"results":[` +
		`{"allowed":true,"limit":10,"remaining":9,"retry_after_ms":0,"reset_after_ms":100,"delay_ms":0,"banned":false,"fallback":false},` +
		`{"allowed":true,"limit":3,"remaining":1,"retry_after_ms":0,"reset_after_ms":39600000,"delay_ms":0,"banned":false,"fallback":false}]}`
	if r.status != 200 || strings.TrimSpace(r.body) != want {
		t.Fatalf("%d %s\nwant %s", r.status, r.body, want)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"per-second";q=10;w=1, "limit1";q=3;w=86400` {
		t.Errorf("RateLimit-Policy %s", got)
	}
	if got := r.header.Get("RateLimit"); got != `"per-second";r=9;t=1, "limit1";r=1;t=39600` {
		t.Errorf("RateLimit %s", got)
	}

	// The daily limit refuses: nothing is charged, not even per-second.
	r = a.post(t, "/v1/throttle", body)
	if r.status != 429 || !strings.Contains(r.body, `"allowed":false,"refused":1,"retry_after_ms":39600000`) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r.header.Get("Retry-After") != "39600" {
		t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
	}
	res, err := a.lim.Peek(context.Background(), "ip:1", funnel.PerSecond(10))
	if err != nil || res.Remaining != 9 {
		t.Errorf("ip:1 after a refusal: %+v %v", res, err)
	}
}

func TestAcquireRelease(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	body := `{"key":"jobs","limit":{"count":1,"period":"30s"}}`
	r := a.post(t, "/v1/acquire", body)
	var d httpapi.Decision
	if err := json.Unmarshal([]byte(r.body), &d); err != nil || r.status != 200 || !d.Allowed || len(d.Lease) != 32 {
		t.Fatalf("acquire: %d %s", r.status, r.body)
	}
	if got := r.header.Get("RateLimit-Policy"); got != `"default";q=1;qu="concurrent-requests"` {
		t.Errorf("RateLimit-Policy %s", got)
	}
	r = a.post(t, "/v1/acquire", body)
	if r.status != 429 || !strings.Contains(r.body, `"allowed":false`) || strings.Contains(r.body, `"lease"`) || r.header.Get("Retry-After") != "30" {
		t.Fatalf("second acquire: %d %s %v", r.status, r.body, r.header)
	}
	r = a.post(t, "/v1/release", `{"key":"jobs","lease":"`+d.Lease+`"}`)
	if r.status != 200 || strings.TrimSpace(r.body) != `{"released":true}` {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	r = a.post(t, "/v1/release", `{"key":"jobs","lease":"`+d.Lease+`"}`)
	if r.status != 200 || strings.TrimSpace(r.body) != `{"released":false}` {
		t.Fatalf("release again: %d %s", r.status, r.body)
	}
	// A lease id of the caller's; an explicit algorithm.
	r = a.post(t, "/v1/acquire", `{"key":"jobs","limit":{"algorithm":"concurrency","count":1,"period":"30s"},"lease":"req-7"}`)
	if r.status != 200 || !strings.Contains(r.body, `"lease":"req-7"`) {
		t.Fatalf("acquire with an id: %d %s", r.status, r.body)
	}
	// A lease that is not released expires.
	a.clock.add(30 * time.Second)
	if r := a.post(t, "/v1/acquire", body); r.status != 200 {
		t.Fatalf("acquire after expiry: %d %s", r.status, r.body)
	}

	for _, c := range []struct{ path, body, detail string }{
		{"/v1/acquire", `{"key":"j","limit":{"algorithm":"gcra","count":1,"period":"1s"}}`, "concurrency"},
		{"/v1/acquire", `{"key":"j","limit":{"count":0,"period":"1s"}}`, "invalid limit"},
		{"/v1/release", `{"key":"j"}`, "the lease is missing"},
		{"/v1/release", `{"lease":"x"}`, "the key is missing"},
	} {
		r := a.post(t, c.path, c.body)
		if r.status != 422 || !strings.Contains(r.problem.Detail, c.detail) {
			t.Errorf("%s %s: %d %s", c.path, c.body, r.status, r.body)
		}
	}
}

// A concurrency limit that queues: /v1/acquire answers the delay,
// /v1/release takes the latency, which moves the unit delay.
func TestAcquireQueue(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	acquire := func(id string) httpapi.Decision {
		t.Helper()
		r := a.post(t, "/v1/acquire", `{"key":"q","limit":{"count":2,"period":"30s","burst":3,"unit_delay":"100ms"},"lease":"`+id+`"}`)
		var d httpapi.Decision
		if err := json.Unmarshal([]byte(r.body), &d); err != nil {
			t.Fatalf("acquire %s: %d %s", id, r.status, r.body)
		}
		return d
	}
	var got []string
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		d := acquire(id)
		got = append(got, fmt.Sprintf("%v:%d:%d", d.Allowed, d.Remaining, d.DelayMs))
	}
	if want := "[true:4:0 true:3:0 true:2:100 true:1:100 true:0:200 false:0:0]"; fmt.Sprint(got) != want {
		t.Errorf("acquires %v, want %s", got, want)
	}
	r := a.post(t, "/v1/release", `{"key":"q","lease":"a","latency":"300ms"}`)
	if r.status != 200 || strings.TrimSpace(r.body) != `{"released":true}` {
		t.Fatalf("release with a latency: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ body, detail string }{
		{`{"key":"q","lease":"a","latency":"300ms"}`, "not held"},
		{`{"key":"q","lease":"b","latency":"-1s"}`, "latency"},
		{`{"key":"q","lease":"b","latency":"25h"}`, "latency"},
		{`{"key":"q","lease":"b","latency":"soon"}`, "latency"},
	} {
		r := a.post(t, "/v1/release", c.body)
		if r.status != 422 || !strings.Contains(r.problem.Detail, c.detail) {
			t.Errorf("release %s: %d %s", c.body, r.status, r.body)
		}
	}
	// (100ms + 300ms) / 2 per unit; the fifth lease held waits two.
	if d := acquire("g"); !d.Allowed || d.DelayMs != 400 {
		t.Errorf("after the latency: %+v", d)
	}
	for _, body := range []string{
		`{"key":"q","limit":{"count":2,"period":"30s","unit_delay":"-1s"}}`,
		`{"key":"q","limit":{"count":2,"period":"30s","unit_delay":"25h"}}`,
		`{"key":"q","limit":{"count":2,"period":"30s","burst":-1}}`,
	} {
		if r := a.post(t, "/v1/acquire", body); r.status != 422 {
			t.Errorf("acquire %s: %d %s", body, r.status, r.body)
		}
	}
}

func TestRefund(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	a.post(t, "/v1/throttle", `{"key":"k","limit":{"count":10,"period":"1s"},"quantity":6}`)
	r := a.post(t, "/v1/refund", `{"key":"k","limit":{"count":10,"period":"1s"},"quantity":4}`)
	if r.status != 204 || r.body != "" {
		t.Fatalf("refund: %d %q", r.status, r.body)
	}
	r = a.do(t, "GET", "/v1/keys/k?count=10&period=1s", "")
	if !strings.Contains(r.body, `"remaining":8`) {
		t.Errorf("after a refund: %s", r.body)
	}
	r = a.post(t, "/v1/refund", `{"key":"k","limit":{"algorithm":"concurrency","count":1,"period":"1s"}}`)
	if r.status != 422 || !strings.Contains(r.problem.Detail, "/v1/release") {
		t.Errorf("refund of a lease: %d %s", r.status, r.body)
	}
}

func TestBans(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	body := `{"key":"login:bob","limit":{"algorithm":"fixed_window","count":1,"period":"1m","ban":"1h"}}`
	if r := a.post(t, "/v1/throttle", body); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := a.post(t, "/v1/throttle", body); r.status != 429 {
		t.Fatalf("overflow: %d %s", r.status, r.body)
	}
	a.clock.add(2 * time.Minute) // a new window, but the ban holds
	r := a.post(t, "/v1/throttle", body)
	if r.status != 429 || !strings.Contains(r.body, `"banned":true`) || r.header.Get("Retry-After") != "3480" {
		t.Fatalf("banned: %d %s %v", r.status, r.body, r.header)
	}
	r = a.do(t, "GET", "/v1/bans", "")
	want := `{"bans":[{"key":"login:bob","until":"2026-11-22T13:00:00Z"}]}`
	if r.status != 200 || strings.TrimSpace(r.body) != want {
		t.Fatalf("bans: %d %s\nwant %s", r.status, r.body, want)
	}
	r = a.do(t, "DELETE", "/v1/bans/login:bob", "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"unbanned":true}` {
		t.Fatalf("unban: %d %s", r.status, r.body)
	}
	r = a.do(t, "DELETE", "/v1/bans/login:bob", "")
	if r.status != 200 || strings.TrimSpace(r.body) != `{"unbanned":false}` {
		t.Fatalf("unban again: %d %s", r.status, r.body)
	}
	if r := a.do(t, "GET", "/v1/bans", ""); strings.TrimSpace(r.body) != `{"bans":[]}` {
		t.Errorf("bans after unban: %s", r.body)
	}
	if r := a.post(t, "/v1/throttle", body); r.status != 200 {
		t.Errorf("after unban: %d %s", r.status, r.body)
	}
}

func TestLeakyBucketDelay(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	body := `{"key":"k","limit":{"algorithm":"leaky_bucket","count":10,"period":"1s","burst":5,"delay":1}}`
	var delays []string
	for range 4 {
		r := a.post(t, "/v1/throttle", body)
		var d httpapi.Decision
		json.Unmarshal([]byte(r.body), &d)
		delays = append(delays, fmt.Sprintf("%d:%v:%d", r.status, d.Allowed, d.DelayMs))
	}
	// The first passes, then one more at once (delay=1), then each waits
	// one more interval of 100 ms.
	if want := "[200:true:0 200:true:0 200:true:100 200:true:200]"; fmt.Sprint(delays) != want {
		t.Errorf("delays %v, want %s", delays, want)
	}
}

// A key holding another algorithm's state: 409.
func TestWrongType(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	a.post(t, "/v1/throttle", `{"key":"k","limit":{"algorithm":"sliding_log","count":10,"period":"1s"}}`)
	r := a.post(t, "/v1/throttle", `{"key":"k","limit":{"algorithm":"fixed_window","count":10,"period":"1s"}}`)
	if r.status != 409 || !strings.Contains(r.problem.Detail, "WRONGTYPE") {
		t.Errorf("%d %s", r.status, r.body)
	}
}

func TestThrottleAllDuplicateKeys(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	lim := `"limit":{"count":10,"period":"1s"}`
	r := a.post(t, "/v1/throttle", `{"limits":[{"key":"a",`+lim+`},{"key":"a",`+lim+`}]}`)
	if r.status != 422 || r.problem == nil || !strings.Contains(r.problem.Detail, "twice") {
		t.Errorf("%d %s", r.status, r.body)
	}
}
