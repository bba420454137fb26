package httpapi_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
)

// TestLongKey: a key longer than funnel.MaxKeyLen is stored under its hash
// (funnel.BoundKey), as on every edge, on every endpoint that takes a key;
// it was refused with 422 before. A key of funnel.MaxKeyLen bytes is the
// store key as it is.
func TestLongKey(t *testing.T) {
	a := newAPI(t, httpapi.Options{})
	long := strings.Repeat("x", 5000)
	hashed := funnel.BoundKey(long)
	lim := `"limit":{"count":1,"period":"1m"}`
	if r := a.post(t, "/v1/throttle", `{"key":"`+long+`",`+lim+`}`); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	if r := a.post(t, "/v1/throttle", `{"limits":[{"key":"`+long+`",`+lim+`}]}`); r.status != 429 {
		t.Fatalf("second, as one of several: %d %s", r.status, r.body)
	}
	// The store holds the hash, and a peek or a reset of the long key
	// reads it.
	if res, err := a.lim.Peek(t.Context(), hashed, funnel.PerMinute(1).WithBurst(0)); err != nil || res.Remaining != 0 {
		t.Fatalf("the hashed key: %+v %v", res, err)
	}
	if r := a.do(t, "GET", "/v1/keys/"+url.PathEscape(long)+"?count=1&period=1m", ""); r.status != 200 || !strings.Contains(r.body, `"remaining":0`) {
		t.Fatalf("peek: %d %s", r.status, r.body)
	}
	if r := a.do(t, "DELETE", "/v1/keys/"+url.PathEscape(long), ""); r.status != 200 || !strings.Contains(r.body, `"existed":true`) {
		t.Fatalf("reset: %d %s", r.status, r.body)
	}

	exact := strings.Repeat("y", funnel.MaxKeyLen)
	if r := a.post(t, "/v1/throttle", `{"key":"`+exact+`",`+lim+`}`); r.status != 200 {
		t.Fatalf("a key of MaxKeyLen bytes: %d %s", r.status, r.body)
	}
	if _, ok, err := a.lim.TTL(t.Context(), exact); err != nil || !ok {
		t.Fatalf("a key of MaxKeyLen bytes is not stored as it is: %v %v", ok, err)
	}
}
