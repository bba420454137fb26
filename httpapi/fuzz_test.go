package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/memstore"
)

// FuzzBodies sends arbitrary bodies to every endpoint that reads one: the
// answer is a decision (200, 204 or 429), a settle (200), or a client error
// (4xx, such as a settle's 404) with a problem body, never a server error
// or a panic.
func FuzzBodies(f *testing.F) {
	for _, seed := range []string{
		`{"key":"k","limit":{"count":10,"period":"1s"}}`,
		`{"limits":[{"key":"{a}1","limit":{"count":1,"period":"1m","burst":0}},{"key":"{a}2","limit":{"algorithm":"fixed_window","count":1,"calendar":"day","time_zone":"Europe/Paris"}}]}`,
		`{"key":"k","limit":{"algorithm":"leaky_bucket","count":5,"period":"1s","burst":3,"delay":1},"quantity":2}`,
		`{"key":"k","limit":{"algorithm":"concurrency","count":2,"period":"30s"},"lease":"x"}`,
		`{"key":"k","limit":{"algorithm":"sliding_log","count":9223372036854775807,"period":"1ns"}}`,
		`{"key":"","limit":{}}`, `{"key":"k","limit":{"count":-1,"period":"-1s"}}`, `[]`, `null`, `{"key":1}`,
		`{"key":"k","limit":{"count":1,"period":"1s","ban":"1h"},"quantity":-3}`,
		`{"key":"k","limit":{"algorithm":"concurrency","count":2,"period":"30s","burst":3,"unit_delay":"100ms"},"lease":"x","latency":"250ms"}`,
		`{"key":"k","lease":"x","latency":"-9223372036854775807ns"}`,
		`{"key":"k","Key":"j","limit":{"count":1,"period":"1s","COUNT":9}}`, "{\"key\":\"u\xff\",\"limit\":{\"count\":1,\"period\":\"1s\"}}",
		`{"key":"k","limit":{"algorithm":"sliding_log","count":5,"period":"1s"},"quantity":3,"ttl":"90s"}`,
		`{"key":"k","limit":{"count":5,"period":"1s"},"quantity":1,"ttl":"1ns"}`, `{"key":"k","limit":{"count":5,"period":"1s"},"quantity":0,"ttl":"25h"}`,
		`{"key":"k","reservation_id":"00000000000000000000000000000000","actual":7}`, `{"key":"k","reservation_id":"","actual":-7}`,
		`{"key":"k","reservation_id":"x","actual":9223372036854775807,"name":"n"}`,
	} {
		f.Add("/v1/throttle", seed)
		f.Add("/v1/acquire", seed)
		f.Add("/v1/refund", seed)
		f.Add("/v1/release", seed)
		f.Add("/v1/charge", seed)
		f.Add("/v1/reserve", seed)
		f.Add("/v1/settle", seed)
	}
	store := memstore.New(memstore.Options{})
	f.Cleanup(func() { store.Close() })
	h := httpapi.New(funnel.New(store), httpapi.Options{})
	f.Fuzz(func(t *testing.T, path, body string) {
		switch path {
		case "/v1/throttle", "/v1/acquire", "/v1/refund", "/v1/release", "/v1/charge", "/v1/reserve", "/v1/settle":
		default:
			return
		}
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch code := rec.Code; {
		case code == http.StatusOK, code == http.StatusNoContent, code == http.StatusTooManyRequests:
		case code >= 400 && code < 500:
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("%s %q: %d with %q", path, body, code, ct)
			}
		default:
			t.Fatalf("%s %q: %d %s", path, body, code, rec.Body)
		}
	})
}
