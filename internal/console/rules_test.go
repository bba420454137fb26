package console_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/rules"
)

const rulesYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 2}
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
`

// newRulesConsole is a console without credentials over rules.
func newRulesConsole(t testing.TB) (*httptest.Server, *funnel.Limiter) {
	set, err := rules.Parse(strings.NewReader(rulesYAML), "rules.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { store.Close() })
	lim := funnel.New(store)
	c := console.New(console.Options{Limiter: lim, Store: store, Rules: func() *rules.Set { return set }})
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv, lim
}

func getJSON(t testing.TB, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode
}

func TestRulesAndDryRun(t *testing.T) {
	srv, lim := newRulesConsole(t)
	var rep console.RulesReply
	if code := getJSON(t, srv.URL+"/ui/api/rules", &rep); code != 200 || len(rep.Domains) != 1 || len(rep.Domains[0].Rules) != 2 || rep.Version == "" {
		t.Fatalf("rules = %d %+v", code, rep)
	}
	if r := rep.Domains[0].Rules[0]; r.FullKey != "api.path_/login" || !r.Shadow || !r.Deny {
		t.Errorf("first rule = %+v", r)
	}
	// The page shows the tree without logging in: authentication is off.
	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "api.user") || !strings.Contains(string(page), "shadow") {
		t.Errorf("no rules tree in the page")
	}

	q := url.Values{"domain": {"api"}, "entry": {"user=alice"}}
	var dry console.DryRunReply
	for i := range 3 {
		if code := getJSON(t, srv.URL+"/ui/api/dryrun?"+q.Encode(), &dry); code != 200 {
			t.Fatalf("dry run = %d", code)
		}
		if !dry.Matched || dry.Rule != "api.user" || dry.Answer != "OK" || dry.Remaining != 2 {
			t.Fatalf("dry run %d = %+v (a dry run charges nothing)", i, dry)
		}
	}
	// Charged twice, the key is over: the dry run says so, still charging
	// nothing.
	m, _ := mustParse(t).Match("api", []rules.Entry{{Key: "user", Value: "alice"}})
	for range 2 {
		lim.Allow(t.Context(), funnel.BoundKey(m.Key), m.Rule.Limit)
	}
	getJSON(t, srv.URL+"/ui/api/dryrun?"+q.Encode(), &dry)
	if dry.Answer != "OVER_LIMIT" || dry.Remaining != 0 || dry.ResetAfterMS <= 0 {
		t.Fatalf("dry run over the limit = %+v", dry)
	}
	var key console.KeyReply
	if code := getJSON(t, srv.URL+"/ui/api/key?"+q.Encode(), &key); code != 200 || key.Rule != "api.user" || key.Remaining != 0 || !key.Held {
		t.Fatalf("key of the rule = %d %+v", code, key)
	}
	getJSON(t, srv.URL+"/ui/api/dryrun?domain=api&entry=path%3D%2Flogin", &dry)
	if dry.Answer != "OVER_LIMIT" || !dry.Shadow {
		t.Errorf("deny rule in shadow mode = %+v", dry)
	}
	getJSON(t, srv.URL+"/ui/api/dryrun?domain=other&entry=user%3Dalice", &dry)
	if dry.Matched || dry.Answer != "OK" {
		t.Errorf("no rule = %+v", dry)
	}
	for _, bad := range []string{"domain=api", "domain=api&entry=novalue", "entry=a%3Db", "domain=api&entry=a%3Db&hits=-1"} {
		if code := getJSON(t, srv.URL+"/ui/api/dryrun?"+bad, nil); code != 400 {
			t.Errorf("dryrun?%s = %d, want 400", bad, code)
		}
	}
	for _, bad := range []string{"key=k", "key=k&count=1&period=x", "key=&count=1&period=1m", "key=k&count=0&period=1m", "key=k&count=1&period=1m&algorithm=x"} {
		if code := getJSON(t, srv.URL+"/ui/api/key?"+bad, nil); code != 400 {
			t.Errorf("key?%s = %d, want 400", bad, code)
		}
	}
	if code := getJSON(t, srv.URL+"/ui/api/top?window=2h", nil); code != 400 {
		t.Errorf("top?window=2h = %d", code)
	}
}

func mustParse(t testing.TB) *rules.Set {
	set, err := rules.Parse(strings.NewReader(rulesYAML), "rules.yaml", rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// FuzzQuery sends any query to the console's readers: each answers 200, a
// 400 problem, or 404 for a descriptor that no limited rule matches; never
// a panic, never a charge.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"domain=api&entry=user%3Dalice", "key=k&count=1&period=1m&burst=3&ban=1h", "window=15m&edge=resp",
		"domain=api&entries=user%3Da%0Apath%3D%2Flogin&hits=5", "key=%00&count=-1&period=-1s", "algorithm=concurrency&key=k&count=1&period=1s"} {
		f.Add(s)
	}
	srv, _ := newRulesConsole(f)
	f.Fuzz(func(t *testing.T, q string) {
		for _, p := range []string{"dryrun", "key", "top"} {
			resp, err := http.Get(srv.URL + "/ui/api/" + p + "?" + q)
			if err != nil {
				return // not a URL net/http sends
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200, 400, 404, 409:
			default:
				t.Fatalf("%s?%s = %d", p, q, resp.StatusCode)
			}
		}
	})
}
