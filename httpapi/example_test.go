package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/memstore"
)

func Example() {
	// A fixed clock keeps the output exact; real code leaves Now nil.
	store := memstore.New(memstore.Options{Now: func() int64 { return start.UnixNano() }})
	defer store.Close()
	srv := httptest.NewServer(httpapi.New(funnel.New(store), httpapi.Options{}))
	defer srv.Close()

	body := `{"key":"user:42","limit":{"count":30,"period":"1m","burst":1},"name":"per-user"}`
	for range 3 {
		resp, err := http.Post(srv.URL+"/v1/throttle", "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		reply, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.Status)
		for _, h := range []string{"RateLimit-Policy", "RateLimit", "Retry-After"} {
			if v := resp.Header.Get(h); v != "" {
				fmt.Printf("  %s: %s\n", h, v)
			}
		}
		fmt.Printf("  %s", reply)
	}
	// Output:
	// 200 OK
	//   RateLimit-Policy: "per-user";q=2;w=4
	//   RateLimit: "per-user";r=1;t=2
	//   {"allowed":true,"limit":2,"remaining":1,"retry_after_ms":0,"reset_after_ms":2000,"delay_ms":0,"banned":false,"fallback":false}
	// 200 OK
	//   RateLimit-Policy: "per-user";q=2;w=4
	//   RateLimit: "per-user";r=0;t=4
	//   {"allowed":true,"limit":2,"remaining":0,"retry_after_ms":0,"reset_after_ms":4000,"delay_ms":0,"banned":false,"fallback":false}
	// 429 Too Many Requests
	//   RateLimit-Policy: "per-user";q=2;w=4
	//   RateLimit: "per-user";r=0;t=2
	//   Retry-After: 2
	//   {"allowed":false,"limit":2,"remaining":0,"retry_after_ms":2000,"reset_after_ms":4000,"delay_ms":0,"banned":false,"fallback":false}
}

// Errors are problem details.
func Example_problem() {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	srv := httptest.NewServer(httpapi.New(funnel.New(store), httpapi.Options{}))
	defer srv.Close()

	resp, err := http.Post(srv.URL+"/v1/throttle", "application/json",
		strings.NewReader(`{"key":"k","limit":{"count":10,"period":"1 minute"}}`))
	if err != nil {
		panic(err)
	}
	reply, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	fmt.Print(string(reply))
	// Output:
	// 422 Unprocessable Entity application/problem+json
	// {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"httpapi: invalid request: period: \"1 minute\" is not a duration such as \"1s\" or \"1m30s\""}
}

// An LLM gateway's token budget: a call reserves its max_tokens when it
// arrives and settles the tokens it used when its answer ends; what it did
// not use is given back.
func Example_reserveAndSettle() {
	store := memstore.New(memstore.Options{Now: func() int64 { return start.UnixNano() }})
	defer store.Close()
	srv := httptest.NewServer(httpapi.New(funnel.New(store), httpapi.Options{}))
	defer srv.Close()
	post := func(path, body string) []byte {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		reply, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.Status, resp.Header.Get("RateLimit"))
		return reply
	}

	var reserved httpapi.Decision
	reply := post("/v1/reserve", `{"key":"tokens:alice","limit":{"algorithm":"fixed_window","count":10000,"period":"1m"},"quantity":4096}`)
	if err := json.Unmarshal(reply, &reserved); err != nil {
		panic(err)
	}
	fmt.Println("reserved 4096, remaining", reserved.Remaining)

	// … the model answers, using 1234 tokens.
	var settled httpapi.Settled
	reply = post("/v1/settle", `{"key":"tokens:alice","reservation_id":"`+reserved.ReservationID+`","actual":1234}`)
	if err := json.Unmarshal(reply, &settled); err != nil {
		panic(err)
	}
	fmt.Println("settled at", settled.Actual, "of", settled.Estimate, "remaining", settled.Remaining, "again", settled.Again)
	// Output:
	// 200 OK "default";r=5904;t=60
	// reserved 4096, remaining 5904
	// 200 OK "default";r=8766;t=60
	// settled at 1234 of 4096 remaining 8766 again false
}
