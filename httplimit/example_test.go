package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/memstore"
)

// A fixed clock keeps the examples' output exact; real code leaves
// memstore.Options.Now nil.
func fixedClock() int64 { return time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC).UnixNano() }

func Example() {
	store := memstore.New(memstore.Options{Now: fixedClock})
	defer store.Close()
	lim := funnel.New(store)

	// 2 requests at once per client address, then one every 2 seconds.
	mw, err := httplimit.New(lim, funnel.PerMinute(30).WithBurst(1), httplimit.ClientIP(), httplimit.Name("per-ip"))
	if err != nil {
		panic(err)
	}
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	srv := httptest.NewServer(mw(app))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		fmt.Println("  RateLimit-Policy:", resp.Header.Get("RateLimit-Policy"))
		fmt.Println("  RateLimit:", resp.Header.Get("RateLimit"))
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println("  Retry-After:", ra)
			fmt.Println("  Content-Type:", resp.Header.Get("Content-Type"))
		}
		fmt.Printf("  %s", body)
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "per-ip";q=2;w=4
	//   RateLimit: "per-ip";r=1;t=2
	//   hello
	// 200 OK
	//   RateLimit-Policy: "per-ip";q=2;w=4
	//   RateLimit: "per-ip";r=0;t=4
	//   hello
	// 429 Too Many Requests
	//   RateLimit-Policy: "per-ip";q=2;w=4
	//   RateLimit: "per-ip";r=0;t=2
	//   Retry-After: 2
	//   Content-Type: application/problem+json
	//   {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"retry in 2 s","violated-policies":["per-ip"]}
}

// Behind proxies, trust their X-Forwarded-For, and only theirs.
func ExampleClientIP() {
	key := httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:51234" // the load balancer
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.3")
	fmt.Println(key(r)) // 6.6.6.6 was written by the client: not read

	r.RemoteAddr = "203.0.113.9:4711" // a client that connects directly
	fmt.Println(key(r))
	// Output:
	// 198.51.100.7 true
	// 203.0.113.9 true
}

func ExampleIPKey() {
	key := httplimit.IPKey{
		Trusted: []netip.Prefix{netip.MustParsePrefix("2001:db8:ffff::/48")},
		Header:  "Forwarded",
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:ffff::1]:443"
	r.Header.Set("Forwarded", `for="[2001:db8:1:2:3:4:5:6]:4711";proto=https`)
	fmt.Println(key.Key(r)) // IPv6 clients are keyed by their /64
	// Output:
	// 2001:db8:1:2::/64 true
}

// Limit by user, the key an authentication middleware put in the context.
func ExampleFromContext() {
	type userKey struct{}
	key := httplimit.FromContext(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(userKey{}).(string)
		return "user:" + u, ok
	})
	r := httptest.NewRequest("GET", "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "42"))
	fmt.Println(key(r))
	// Output:
	// user:42 true
}

// When the store cannot be reached, the default, funnel.FailClosed, refuses
// with 503 (Fail(funnel.FailOpen) serves the request unlimited).
func ExampleFail() {
	lim := funnel.New(downStore())
	mw, _ := httplimit.New(lim, funnel.PerSecond(10), httplimit.ClientIP(), httplimit.Fail(funnel.FailClosed), httplimit.Logger(quiet()))
	srv := httptest.NewServer(mw(http.NotFoundHandler()))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status)
	fmt.Print(string(body))
	// Output:
	// 503 Service Unavailable
	// {"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity","title":"Temporary Reduced Capacity","status":503,"detail":"the rate limiter is unavailable"}
}

// SetHeaders writes the fields of several limits, for a handler that calls
// the Limiter itself.
func ExampleSetHeaders() {
	h := http.Header{}
	httplimit.SetHeaders(h,
		httplimit.Policy{Name: "burst", Limit: funnel.PerMinute(100), Result: funnel.Result{Allowed: true, Remaining: 37, ResetAfter: 37800 * time.Millisecond}},
		httplimit.Policy{Name: "daily", Limit: funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1000, Calendar: funnel.Daily},
			Result: funnel.Result{Allowed: false, RetryAfter: 5 * time.Hour, ResetAfter: 5 * time.Hour}},
	)
	fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", h.Get("RateLimit"))
	fmt.Println("Retry-After:", h.Get("Retry-After"))
	// Output:
	// RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400
	// RateLimit: "burst";r=37;t=38, "daily";r=0;t=18000
	// Retry-After: 18000
}

// A language model's gateway: 1,000 tokens a minute per API key, checked
// when a request arrives (a Quantity of 0 admits it while the key is not
// over its limit) and charged, into debt, with the tokens its handler
// reports once the response is written.
func ExampleReportedCost() {
	store := memstore.New(memstore.Options{Now: fixedClock})
	defer store.Close()
	lim := funnel.New(store)

	tokens := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 1_000, Period: time.Minute}
	mw, err := httplimit.New(lim, tokens, httplimit.Header("X-Api-Key"), httplimit.Name("tokens"),
		httplimit.ReportedCost(), httplimit.Quantity(func(*http.Request) int64 { return 0 }))
	if err != nil {
		panic(err)
	}
	completion := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "a long answer\n")
		httplimit.ReportCost(r.Context(), 700) // the tokens of the prompt and the answer
	})
	srv := httptest.NewServer(mw(completion))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL, nil)
		req.Header.Set("X-Api-Key", "key-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 OK "tokens";r=1000;t=0
	// 200 OK "tokens";r=300;t=60
	// 429 Too Many Requests "tokens";r=0;t=60
}
