package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/console"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/internal/redistest"
)

// The console is on the HTTP listener of every store: refusals over RESP
// and HTTP show in its top limited by edge, its JSON takes the API's
// credentials, and its page asks browsers to log in.
func TestDaemonConsole(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		name  string
		store string
		lease time.Duration
	}{
		{"memory", "memory", 0},
		{"redis", "redis://" + srv.Addr + "/0", 0},
		{"lease", "redis://" + srv.Addr + "/1", 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Store, cfg.Lease, cfg.RequirePass = tc.store, tc.lease, "pw"
			d, _, _ := start(t, cfg)
			base := "http://" + d.HTTPAddr().String()
			c := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String(), Password: "pw"})
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := "console-" + tc.name
			for range 5 {
				if err := c.Do(ctx, "CL.THROTTLE", key, 0, 1, 60).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				req, _ := http.NewRequest("POST", base+"/v1/throttle", strings.NewReader(`{"key":"`+key+`-http","limit":{"count":1,"period":"1m","burst":0}}`))
				req.Header.Set("Authorization", "Bearer pw")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
			}
			get := func(path, auth string) (int, string) {
				req, _ := http.NewRequest("GET", base+path, nil)
				if auth != "" {
					req.Header.Set("Authorization", auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			code, body := get("/ui/api/top", "Bearer pw")
			var top console.TopReply
			if err := json.Unmarshal([]byte(body), &top); code != 200 || err != nil {
				t.Fatalf("top = %d %s", code, body)
			}
			edges := map[string]uint64{}
			for _, e := range top.Entries {
				edges[e.Edge+" "+e.Key] = e.Count
			}
			// With leases a node may refuse from memory or after a call:
			// every refusal is counted either way.
			if edges["resp "+key] != 4 || edges["http "+key+"-http"] != 2 {
				t.Fatalf("top = %s", body)
			}
			if code, _ := get("/ui/api/top", ""); code != 401 {
				t.Errorf("top without credentials = %d", code)
			}
			if code, _ := get("/ui/api/top", "Bearer wrong"); code != 401 {
				t.Errorf("top with a wrong password = %d", code)
			}
			if code, page := get("/ui/", ""); code != 200 || !strings.Contains(page, `id="login"`) || strings.Contains(page, "pw") && strings.Contains(page, `value="pw"`) {
				t.Errorf("/ui/ = %d %s", code, page)
			}
			code, body = get("/ui/api/live", "Bearer pw")
			if code != 200 || strings.Contains(body, srv.Addr) {
				t.Errorf("live = %d %s", code, body)
			}
			// A Redis store's decisions are timed: p50 and p99 within
			// 0.8 %; the memory store's are not.
			var live console.LiveReply
			if err := json.Unmarshal([]byte(body), &live); err != nil {
				t.Fatal(err)
			}
			if timed := live.StoreLatencyCalls > 0 && live.StoreP50MS != nil && *live.StoreP50MS > 0 && *live.StoreP99MS >= *live.StoreP50MS; timed != (tc.store != "memory") {
				t.Errorf("store latency: %d calls, p50 %v, p99 %v", live.StoreLatencyCalls, live.StoreP50MS, live.StoreP99MS)
			}
		})
	}
}

func TestDaemonNoConsole(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.NoConsole = true
	d, _, _ := start(t, cfg)
	resp, err := http.Get("http://" + d.HTTPAddr().String() + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("/ui/ with no_console = %d, want 404", resp.StatusCode)
	}
}

// The console reads the rate-limit service's rules: their tree and
// version, a dry run that charges nothing, and refusals over gRPC in the
// top limited under the edge grpc.
func TestDaemonConsoleRules(t *testing.T) {
	t.Parallel()
	d, _, _ := start(t, envoyConfig(t, ""))
	base := "http://" + d.HTTPAddr().String()
	var rules console.RulesReply
	code, body := httpDo(t, "GET", base+"/ui/api/rules", "", "")
	if err := json.Unmarshal([]byte(body), &rules); code != 200 || err != nil || len(rules.Domains) != 1 ||
		rules.Domains[0].Rules[0].FullKey != "api.user" || rules.Version == "none" || rules.Reloads != 1 || rules.Failures != 0 {
		t.Fatalf("rules = %d %s", code, body)
	}
	for range 3 {
		code, body = httpDo(t, "GET", base+"/ui/api/dryrun?domain=api&entry=user%3Dbob", "", "")
		if code != 200 || !strings.Contains(body, `"answer":"OK"`) || !strings.Contains(body, `"remaining":2`) {
			t.Fatalf("dry run = %d %s", code, body)
		}
	}
	c := dialRLS(t, d.GRPCAddr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 4 {
		if _, err := c.ShouldRateLimit(ctx, userRequest("bob")); err != nil {
			t.Fatal(err)
		}
	}
	code, body = httpDo(t, "GET", base+"/ui/api/dryrun?domain=api&entry=user%3Dbob", "", "")
	if code != 200 || !strings.Contains(body, `"answer":"OVER_LIMIT"`) {
		t.Fatalf("dry run over the limit = %d %s", code, body)
	}
	var top console.TopReply
	_, body = httpDo(t, "GET", base+"/ui/api/top?edge=grpc", "", "")
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top.Entries) != 1 || top.Entries[0].Count != 2 ||
		!strings.HasPrefix(top.Entries[0].Key, "api_user_bob") {
		t.Fatalf("top = %s", body)
	}
	// The same rule over the HTTP listener's /json: its refusals under
	// the edge http, and every decision by edge, rule and outcome in the
	// live view.
	for range 3 {
		httpDo(t, "POST", base+"/json", "", `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}`)
	}
	_, body = httpDo(t, "GET", base+"/ui/api/top?edge=http", "", "")
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top.Entries) != 1 || top.Entries[0].Count != 1 ||
		!strings.HasPrefix(top.Entries[0].Key, "api_user_carol") {
		t.Fatalf("top of http = %s", body)
	}
	want := map[string]float64{"grpc api.user allowed": 2, "grpc api.user refused": 2, "http api.user allowed": 2, "http api.user refused": 1}
	var got map[string]float64
	eventually.True(t, "the rule's decisions by edge in the live view", func() bool {
		var live console.LiveReply
		_, body := httpDo(t, "GET", base+"/ui/api/live?points=60", "", "")
		if err := json.Unmarshal([]byte(body), &live); err != nil {
			t.Fatal(err)
		}
		got = map[string]float64{}
		for _, s := range live.Series {
			if s.Rule == "api.user" {
				got[s.Edge+" "+s.Rule+" "+s.Outcome] = s.Total
			}
		}
		return maps.Equal(got, want)
	})
}
