package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/auth"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/internal/testlog"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// stack is what the daemon mounts: the HTTP API behind the credentials,
// and the console beside it, both over one memory store.
type stack struct {
	srv  *httptest.Server
	con  *console.Server
	lim  *funnel.Limiter
	logs *testlog.Buffer
}

const password = "s3cret-pass"

// stackRules are the rules of the stack's console: nested descriptors,
// each algorithm's name, shadow and quota mode, charge_over_limit.
const stackRules = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
      - key: from_number
        quota_mode: true
        charge_over_limit: true
        rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 10, burst: 2}
  - key: auth
    value: login
    shadow_mode: true
    rate_limit: {algorithm: sliding_window, unit: second, requests_per_unit: 3}
`

func newStack(t *testing.T) *stack {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	m := metrics.New(metrics.Options{NoRuntimeMetrics: true})
	top := console.NewTop(nil)
	lim := funnel.New(console.Watch(store, top, "http"))
	creds := auth.New(password, nil)
	log, buf := testlog.New(nil)
	api := httpapi.New(lim, httpapi.Options{Observe: m.Observer("http"), Metrics: m.Handler()})
	guard := creds.Middleware(auth.HTTPOptions{Exempt: auth.HealthPaths})
	set, err := rules.Parse(strings.NewReader(stackRules), "rules.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The rate-limit service's /json, as the daemon serves it beside the
	// API: its decisions counted by edge and rule.
	decisions := new(console.Decisions)
	rlsSrv := rls.New(funnel.New(console.WatchRefusals(store, top, "http")), rls.Static(set), rls.Options{
		Observe: func(rule string, r funnel.Result, err error) { decisions.Observe("http", rule, r, err) },
	})
	c := console.New(console.Options{Limiter: funnel.New(store), Store: store, Credentials: creds, Top: top,
		Rules: func() *rules.Set { return set }, Decisions: decisions,
		Gatherer: m.Registry(), StoreName: "memory", Keys: store.Len, Logger: log,
		StoreStats: func() map[string]float64 { return map[string]float64{"evicted": float64(store.Stats().Evicted)} }})
	t.Cleanup(c.Close)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, console.Prefix) {
			c.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/json" {
			guard(rlsSrv.JSONHandler()).ServeHTTP(w, r)
			return
		}
		guard(api).ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &stack{srv: srv, con: c, lim: lim, logs: buf}
}

// throttle sends one decision of key through the HTTP API: one per minute,
// banned for an hour once over.
func (s *stack) throttle(t *testing.T, key string) int {
	t.Helper()
	return s.throttleLimit(t, key, `{"count":1,"period":"1m","burst":0,"ban":"1h"}`)
}

// throttleLimit sends one decision of key under limit (JSON) through the
// HTTP API.
func (s *stack) throttleLimit(t *testing.T, key, limit string) int {
	t.Helper()
	body := `{"key":"` + key + `","limit":` + limit + `}`
	req, _ := http.NewRequest("POST", s.srv.URL+"/v1/throttle", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// descriptor sends one request of the rate-limit service's /json: a
// descriptor of domain messaging.
func (s *stack) descriptor(t *testing.T, entries string) int {
	t.Helper()
	body := `{"domain":"messaging","descriptors":[{"entries":[` + entries + `]}]}`
	req, _ := http.NewRequest("POST", s.srv.URL+"/json", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var csrfRE = regexp.MustCompile(`name="csrf" (?:value|content)="([^"]+)"`)

// browser is an HTTP client with cookies, as a browser is.
func browser(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token in %s", page)
	}
	return m[1]
}

// login logs c in and returns the page's CSRF token.
func login(t *testing.T, s *stack, c *http.Client, pass string) (string, string) {
	t.Helper()
	_, page, _ := get(t, c, s.srv.URL+"/ui/")
	resp, err := c.PostForm(s.srv.URL+"/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "password": {pass}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `name="csrf"`) {
		return "", string(b)
	}
	return csrfOf(t, string(b)), string(b)
}

func TestLoginAndHeaders(t *testing.T) {
	s := newStack(t)
	c := browser(t)
	code, page, h := get(t, c, s.srv.URL+"/ui/")
	if code != 200 || !strings.Contains(page, `id="login"`) {
		t.Fatalf("GET /ui/ = %d %s", code, page)
	}
	if h.Get("Content-Security-Policy") != console.CSP || !strings.Contains(console.CSP, "script-src 'self'") {
		t.Errorf("CSP = %q", h.Get("Content-Security-Policy"))
	}
	if _, page := login(t, s, c, "wrong"); !strings.Contains(page, `id="login-error"`) {
		t.Fatalf("a wrong password was not refused: %s", page)
	}
	if code, _, _ := get(t, c, s.srv.URL+"/ui/api/top"); code != 401 {
		t.Fatalf("top without logging in = %d", code)
	}
	tok, page := login(t, s, c, password)
	if !strings.Contains(page, `id="live"`) {
		t.Fatalf("no console after login: %s", page)
	}
	if strings.Contains(page, password) {
		t.Fatal("the password is in the page")
	}
	if tok == "" {
		t.Fatal("no token")
	}
	for _, p := range []string{"top?window=15m", "live", "bans", "rules", "key?key=k&count=1&period=1m"} {
		if code, body, _ := get(t, c, s.srv.URL+"/ui/api/"+p); code != 200 {
			t.Errorf("GET %s = %d %s", p, code, body)
		}
	}
	if code, _, _ := get(t, c, s.srv.URL+"/ui/static/console.js"); code != 200 {
		t.Errorf("script = %d", code)
	}
	if code, _, _ := get(t, c, s.srv.URL+"/ui/static/index.html"); code != 404 {
		t.Errorf("a template is served: %d", code)
	}
	// A script reads the JSON with the API's credentials.
	req, _ := http.NewRequest("GET", s.srv.URL+"/ui/api/top", nil)
	req.Header.Set("Authorization", "Bearer "+password)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("top with a bearer token: %v %v", resp.StatusCode, err)
	}
}

// Visitors who have not logged in keep nothing on the server, so that
// they cannot push a logged-in session out; the login form's token must
// match its cookie.
func TestVisitorsKeepNoSession(t *testing.T) {
	s := newStack(t)
	c := browser(t)
	login(t, s, c, password)
	for range 5000 { // several times the sessions kept
		resp, err := http.Get(s.srv.URL + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if code, body, _ := get(t, c, s.srv.URL+"/ui/api/bans"); code != 200 {
		t.Fatalf("the session was pushed out: %d %s", code, body)
	}
	// A token without its cookie (another site's form) is refused.
	_, page, _ := get(t, browser(t), s.srv.URL+"/ui/")
	resp, err := http.PostForm(s.srv.URL+"/ui/login", url.Values{"csrf": {csrfOf(t, page)}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("login without the form's cookie = %d", resp.StatusCode)
	}
}

// Logins are limited per client address, right or wrong.
func TestLoginLimit(t *testing.T) {
	s := newStack(t)
	c := browser(t)
	for range 10 {
		if _, page := login(t, s, c, "wrong"); !strings.Contains(page, `id="login-error"`) {
			t.Fatalf("a wrong password was not refused: %s", page)
		}
	}
	if _, page := login(t, s, c, password); !strings.Contains(page, `id="login-wait"`) {
		t.Fatalf("the 11th attempt in a minute was let through: %s", page)
	}
	if !strings.Contains(s.logs.String(), "too many attempts") {
		t.Errorf("not logged: %s", s.logs.String())
	}
}

func TestActionsNeedTheCSRFToken(t *testing.T) {
	s := newStack(t)
	c := browser(t)
	tok, _ := login(t, s, c, password)
	for range 3 {
		s.throttle(t, "mallory")
	}
	if code := s.throttle(t, "mallory"); code != 429 {
		t.Fatalf("throttle = %d, want 429", code)
	}
	var top console.TopReply
	_, body, _ := get(t, c, s.srv.URL+"/ui/api/top")
	json.Unmarshal([]byte(body), &top)
	if len(top.Entries) != 1 || top.Entries[0].Key != "mallory" || top.Entries[0].Count != 3 {
		t.Fatalf("top = %s", body)
	}
	var bans console.BansReply
	_, body, _ = get(t, c, s.srv.URL+"/ui/api/bans")
	json.Unmarshal([]byte(body), &bans)
	if len(bans.Bans) != 1 || bans.Bans[0].Key != "mallory" || bans.Bans[0].LeftMS <= 0 {
		t.Fatalf("bans = %s", body)
	}
	// Without the token, or with another, the action is refused.
	for _, form := range []url.Values{{"key": {"mallory"}}, {"key": {"mallory"}, "csrf": {tok + "x"}}} {
		resp, err := c.PostForm(s.srv.URL+"/ui/api/unban", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Fatalf("unban without the token = %d", resp.StatusCode)
		}
	}
	// A bearer token does not take actions.
	req, _ := http.NewRequest("POST", s.srv.URL+"/ui/api/unban", strings.NewReader("key=mallory"))
	req.Header.Set("Authorization", "Bearer "+password)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, _ := http.DefaultClient.Do(req); resp.StatusCode != 401 {
		t.Fatalf("unban with a bearer token = %d", resp.StatusCode)
	}
	if code := s.throttle(t, "mallory"); code != 429 {
		t.Fatalf("the ban was lifted without the token: %d", code)
	}
	resp, err := c.PostForm(s.srv.URL+"/ui/api/unban", url.Values{"key": {"mallory"}, "csrf": {tok}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"done":true`) {
		t.Fatalf("unban = %d %s", resp.StatusCode, b)
	}
	if !strings.Contains(s.logs.String(), "console: audit") || !strings.Contains(s.logs.String(), "user=default action=unban key=mallory") {
		t.Errorf("no audit line: %s", s.logs.String())
	}
	// The key is not banned any more, but still over its limit until reset.
	resp, _ = c.PostForm(s.srv.URL+"/ui/api/reset", url.Values{"key": {"mallory"}, "csrf": {tok}})
	resp.Body.Close()
	if code := s.throttle(t, "mallory"); code != 200 {
		t.Fatalf("after unban and reset = %d", code)
	}
}

func TestLiveCountsDecisions(t *testing.T) {
	s := newStack(t)
	c := browser(t)
	login(t, s, c, password)
	s.con.SampleNow()
	for range 5 {
		s.throttle(t, "eve")
	}
	s.con.SampleNow()
	var live console.LiveReply
	_, body, _ := get(t, c, s.srv.URL+"/ui/api/live")
	if err := json.Unmarshal([]byte(body), &live); err != nil {
		t.Fatal(err)
	}
	// One admitted and four refused (banned), in the points and in total.
	got := map[string][2]float64{}
	for _, se := range live.Series {
		if se.Edge != "http" || se.Rule != "http" || len(se.Points) == 0 {
			t.Fatalf("series %+v", se)
		}
		var sum float64 // the sampler's own tick may have taken some
		for _, p := range se.Points {
			sum += p
		}
		got[se.Outcome] = [2]float64{sum, se.Total}
	}
	if got["allowed"] != [2]float64{1, 1} || got["refused"] != [2]float64{0, 0} || got["banned"] != [2]float64{4, 4} {
		t.Errorf("series = %v\n%s", got, body)
	}
	if live.Keys != 1 || live.Store != "memory" || live.TopRefusals != 4 || len(live.StoreStats) != 1 {
		t.Errorf("live = %s", body)
	}
}
