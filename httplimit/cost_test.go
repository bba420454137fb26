package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httplimit"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// tokensApp reports as its cost the query parameter tokens, as a language
// model's gateway reports the tokens of a response once it has ended.
func tokensApp() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := r.URL.Query().Get("tokens"); s != "" {
			n, _ := strconv.ParseInt(s, 10, 64)
			if !httplimit.ReportCost(r.Context(), n) {
				http.Error(w, "not reported", 500)
				return
			}
		}
		io.WriteString(w, "answer\n")
	})
}

// runReportedCost: 100 tokens a minute per user, checked when a request
// arrives (Quantity 0: admitted while not over the limit) and charged
// when its handler reports its tokens, into debt.
func runReportedCost(t *testing.T, lim *funnel.Limiter, c *clock) {
	t.Helper()
	limit := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 100, Period: time.Minute}
	srv := serve(t, newMW(t, lim, limit, httplimit.Header("User"), httplimit.ReportedCost(),
		httplimit.Quantity(func(*http.Request) int64 { return 0 })), tokensApp())
	ask := func(tokens string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/?tokens="+tokens, nil)
		req.Header.Set("User", "alice")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	for i, s := range []struct{ tokens, want string }{
		{"80", `200 "default";r=100;t=0`},
		{"50", `200 "default";r=20;t=60`}, // 130 of 100: in debt
		{"1", `429 "default";r=0;t=60`},
		{"", `429 "default";r=0;t=60`},
	} {
		if got := ask(s.tokens); got != s.want {
			t.Errorf("step %d (%s tokens): %s, want %s", i, s.tokens, got, s.want)
		}
	}
	c.add(time.Minute)
	// A handler that reports nothing costs what its admission took: 0.
	if got := ask(""); got != `200 "default";r=100;t=0` {
		t.Errorf("the next minute: %s", got)
	}
	if got := ask("-5"); got != `500 "default";r=100;t=0` {
		t.Errorf("a negative cost: %s", got)
	}
	if got := ask("0"); got != `200 "default";r=100;t=0` {
		t.Errorf("after a negative cost: %s", got)
	}
}

func TestReportedCost(t *testing.T) {
	t.Parallel()
	c := newClock()
	runReportedCost(t, memLimiter(t, c), c)
}

var redisPrefixes atomic.Int64

func TestReportedCostRedis(t *testing.T) {
	t.Parallel()
	c := newClock()
	srv := redistest.StartServer(t)
	st := redisstore.New(srv.Client(), redisstore.Options{Now: c.now, Timeout: 20 * time.Second,
		Prefix: fmt.Sprintf("mw%d:", redisPrefixes.Add(1))})
	runReportedCost(t, funnel.New(st), c)
}

// A cost smaller than the admission's quantity gives the difference back;
// a larger one charges it. Without ReportedCost, ReportCost reports false.
func TestReportedCostRefund(t *testing.T) {
	t.Parallel()
	c := newClock()
	lim := memLimiter(t, c)
	limit := funnel.Limit{Algorithm: funnel.FixedWindow, Count: 10, Period: time.Minute}
	srv := serve(t, newMW(t, lim, limit, httplimit.Header("User"), httplimit.ReportedCost(),
		httplimit.Quantity(func(*http.Request) int64 { return 4 })), tokensApp())
	for _, tokens := range []string{"1", "6"} {
		req, _ := http.NewRequest("GET", srv.URL+"/?tokens="+tokens, nil)
		req.Header.Set("User", "bob")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// 1 then 6 were charged: 3 remain.
	res, err := lim.PeekN(t.Context(), "bob", limit, 0)
	if err != nil || res.Remaining != 3 {
		t.Errorf("bob: %+v, %v; want 3 remaining", res, err)
	}
	plain := serve(t, newMW(t, lim, limit, httplimit.Header("User")), tokensApp())
	req, _ := http.NewRequest("GET", plain.URL+"/?tokens=1", nil)
	req.Header.Set("User", "carol")
	resp, err := plain.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Errorf("ReportCost without ReportedCost: %d, want the app's 500", resp.StatusCode)
	}
}
