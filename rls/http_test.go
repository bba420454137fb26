package rls_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
	"github.com/funnelrl/funnel/storetest"
)

// httpEnv serves e's /json and /healthcheck on 127.0.0.1:0.
func httpEnv(t *testing.T, e *env) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/json", e.srv.JSONHandler())
	mux.Handle("/healthcheck", e.srv.HealthHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL
}

// reply is an HTTP answer: its status, Content-Type and body.
type reply struct {
	status int
	ctype  string
	body   string
}

func do(t *testing.T, method, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}
}

// decode reads a RateLimitResponse in proto3 JSON.
func decode(t *testing.T, body string) *rlsv3.RateLimitResponse {
	t.Helper()
	var r rlsv3.RateLimitResponse
	if err := protojson.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	return &r
}

func TestJSON(t *testing.T) {
	e := extEnv(t, rls.Options{})
	url := httpEnv(t, e) + "/json"
	// As in envoy's README: the curl example, with proto3 JSON's names.
	body := `{"domain": "ext", "descriptors": [{"entries": [{"key": "b", "value": "1"}]}]}`
	for i := 2; i >= 0; i-- {
		r := do(t, "POST", url, body)
		if r.status != http.StatusOK || r.ctype != "application/json" {
			t.Fatalf("%+v", r)
		}
		resp := decode(t, r.body)
		if codesOf(resp) != "OK OK" || resp.Statuses[0].LimitRemaining != uint32(i) ||
			resp.Statuses[0].CurrentLimit.RequestsPerUnit != 3 {
			t.Fatalf("%v", resp)
		}
	}
	r := do(t, "POST", url, body)
	if r.status != http.StatusTooManyRequests || r.ctype != "application/json" {
		t.Fatalf("%+v", r)
	}
	if resp := decode(t, r.body); codesOf(resp) != "OVER_LIMIT OVER_LIMIT" {
		t.Fatalf("%v", resp)
	}
	// The same limits as over gRPC: b is spent there too, and a charge over
	// gRPC shows over HTTP.
	e.expectCodes(t, 1, "OVER_LIMIT OVER_LIMIT", "ext", desc("b", "1"))
	e.expectCodes(t, 1, "OK OK", "ext", desc("a", "1"))
	r = do(t, "POST", url, `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1"}]}],"hitsAddend":2}`)
	if resp := decode(t, r.body); r.status != http.StatusOK || resp.Statuses[0].LimitRemaining != 7 {
		t.Fatalf("%+v", r)
	}
	// The snake_case names that proto3 JSON accepts too.
	r = do(t, "POST", url, `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1"}]}],"hits_addend":7}`)
	if resp := decode(t, r.body); r.status != http.StatusOK || resp.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestJSONRefusals(t *testing.T) {
	e := extEnv(t, rls.Options{})
	url := httpEnv(t, e) + "/json"
	for _, c := range []struct {
		method, body string
		status       int
		text         string
	}{
		{"POST", `{`, 400, "the body is not a RateLimitRequest in proto3 JSON"},
		{"POST", ``, 400, "the body is not a RateLimitRequest in proto3 JSON"},
		{"POST", `{}`, 400, "rls: the domain is required"},
		{"POST", `{"domain":"ext","descriptors":[{"entries":[{"key":"a"}]}],"extra":1}`, 400, `unknown field "extra"`},
		{"POST", `{"domain":"ext","descriptors":"a"}`, 400, "the body is not a RateLimitRequest"},
		{"POST", `{"domain":"ext","hitsAddend":-1}`, 400, "the body is not a RateLimitRequest"},
		{"POST", `{"domain":"ext"}`, 400, "rls: at least one descriptor is required"},
		{"POST", `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1"}],"limit":{"requestsPerUnit":1}}]}`, 400, "the limit override has no valid unit"},
		{"GET", `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`, 405, "rls: /json takes a POST"},
		{"POST", `{"domain":"` + strings.Repeat("x", rls.MaxJSONBody) + `"}`, 413, "larger than 1 MiB"},
		// A body that means two things is refused by protojson: a field
		// twice (under its JSON or its proto name), a name in another case
		// (unknown), a string that is not UTF-8 or a lone surrogate.
		{"POST", `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1","value":"2"}]}]}`, 400, "duplicate field"},
		{"POST", `{"domain":"ext","hitsAddend":1,"hits_addend":1000,"descriptors":[{"entries":[{"key":"a","value":"1"}]}]}`, 400, "duplicate field"},
		{"POST", `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1","Value":"2"}]}]}`, 400, `unknown field "Value"`},
		{"POST", "{\"domain\":\"ext\",\"descriptors\":[{\"entries\":[{\"key\":\"a\",\"value\":\"1\xff\"}]}]}", 400, "invalid UTF-8"},
		{"POST", `{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1\udcff"}]}]}`, 400, "the body is not a RateLimitRequest"},
	} {
		r := do(t, c.method, url, c.body)
		if r.status != c.status || !strings.HasPrefix(r.ctype, "text/plain") || !strings.Contains(r.body, c.text) {
			t.Errorf("%s %.60s: %d %q %q, want %d %q", c.method, c.body, r.status, r.ctype, r.body, c.status, c.text)
		}
	}
	// Nothing was charged.
	if got := remaining(t, e, "a", "1"); got != 9 {
		t.Fatalf("a has %d left, want 9", got)
	}
}

func TestJSONStoreFailures(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("%w: dial tcp 10.0.0.7:6379: connection refused", funnel.ErrUnavailable), http.StatusServiceUnavailable},
		// A deadline of the store's own, the request's not passed: a store
		// that cannot decide (funnel.Unavailable), as on every edge (it was
		// 504 here before).
		{context.DeadlineExceeded, http.StatusServiceUnavailable},
		{funnel.ErrCrossSlot, http.StatusInternalServerError},
		{fmt.Errorf("secret detail"), http.StatusInternalServerError},
	} {
		store := &fakeStore{do: func([]funnel.Op, []funnel.Result) error { return c.err }}
		e := start(t, store, loadRules(t, "../rules/testdata/envoy"), rls.Options{})
		r := do(t, "POST", httpEnv(t, e)+"/json", `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`)
		if r.status != c.status || strings.Contains(r.body, "10.0.0.7") || strings.Contains(r.body, "secret") {
			t.Errorf("%v: %+v, want %d", c.err, r, c.status)
		}
	}
}

// A fail-open answer over /json says that it is one: the header
// Funnel-Fallback and "fallback": true in the dynamic metadata.
func TestJSONFallback(t *testing.T) {
	store := &fakeStore{do: func(ops []funnel.Op, res []funnel.Result) error {
		for i := range ops {
			res[i] = funnel.Result{Fallback: true, Allowed: true}
		}
		return nil
	}}
	e := start(t, store, loadRules(t, "../rules/testdata/envoy"), rls.Options{})
	resp, err := http.Post(httpEnv(t, e)+"/json", "application/json", strings.NewReader(`{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get(rls.FallbackHeader) != "open" || !decode(t, string(b)).GetDynamicMetadata().GetFields()["fallback"].GetBoolValue() {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
}

func TestHealthcheck(t *testing.T) {
	e := extEnv(t, rls.Options{})
	url := httpEnv(t, e) + "/healthcheck"
	for _, method := range []string{"GET", "HEAD", "POST"} {
		want := "OK"
		if method == "HEAD" {
			want = ""
		}
		if r := do(t, method, url, ""); r.status != http.StatusOK || r.body != want {
			t.Fatalf("%s: %+v", method, r)
		}
	}
	e.srv.SetServing(false)
	if r := do(t, "GET", url, ""); r.status != http.StatusInternalServerError || r.body != "" {
		t.Fatalf("not serving: %+v", r)
	}
	e.srv.SetServing(true)
	if r := do(t, "GET", url, ""); r.status != http.StatusOK {
		t.Fatalf("serving again: %+v", r)
	}
}

// FuzzJSON checks that /json answers any body with a decision (200 or 429,
// whose body is a RateLimitResponse) or a refusal (400), and a decision
// exactly when the body is a RateLimitRequest that ShouldRateLimit
// decides.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"domain": "ext", "descriptors": [{"entries": [{"key": "b", "value": "1"}]}]}`,
		`{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"1"}],"hitsAddend":"3"}],"hitsAddend":2}`,
		`{"domain":"ext","descriptors":[{"entries":[{"key":"gcra","value":"1"}],"isNegativeHits":true}]}`,
		`{"domain":"ext","descriptors":[{"entries":[{"key":"x"}],"limit":{"requestsPerUnit":2,"unit":"MINUTE"}}]}`,
		`{"domain":"ext","descriptors":[{"entries":[{"key":"blocked","value":"1"}]},{"entries":[{"key":"shadow"}]}]}`,
		`{"domain":"unknown","descriptors":[{}]}`,
		`{"domain":"ext","descriptors":[{"entries":[{"key":"a","value":"\u0000"}]}],"unknown":1}`,
		`{"domain": 1}`, `[]`, `null`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	set, err := rules.Parse(strings.NewReader(extRules), "ext.yaml", rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	clock := storetest.NewClock(t0.UnixNano())
	srv := rls.New(funnel.New(memstore.New(memstore.Options{Now: clock.Now})), rls.Static(set), rls.Options{
		Logger: slog.New(slog.DiscardHandler),
		Now:    func() time.Time { return time.Unix(0, clock.Now()) },
	})
	h := srv.JSONHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/json", bytes.NewReader(body)))
		var req rlsv3.RateLimitRequest
		parses := protojson.Unmarshal(body, &req) == nil
		switch w.Code {
		case http.StatusOK, http.StatusTooManyRequests:
			if !parses {
				t.Fatalf("%q: decided a body that is not a RateLimitRequest", body)
			}
			var resp rlsv3.RateLimitResponse
			if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil {
				t.Fatalf("%q: answer %q: %v", body, w.Body, err)
			}
			over := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
			if over != (w.Code == http.StatusTooManyRequests) || len(resp.Statuses) != len(req.Descriptors) {
				t.Fatalf("%q: %d %v", body, w.Code, &resp)
			}
		case http.StatusBadRequest:
			if parses && req.Domain != "" && len(req.Descriptors) > 0 {
				if _, err := srv.ShouldRateLimit(context.Background(), &req); err == nil {
					t.Fatalf("%q: refused a request that ShouldRateLimit decides", body)
				}
			}
		default:
			t.Fatalf("%q: status %d %q", body, w.Code, w.Body)
		}
	})
}
