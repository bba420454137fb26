package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/internal/testlog"
)

const waitFor = 10 * time.Second

// testConfig is the default configuration on a free port of 127.0.0.1.
func testConfig() config.Config {
	cfg := config.Default()
	cfg.RESP, cfg.HTTP, cfg.GRPC = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}

// start builds a daemon of cfg and runs it until the returned stop is
// called; stop returns Run's error.
func start(t *testing.T, cfg config.Config) (*daemon.Daemon, *testlog.Buffer, func() error) {
	t.Helper()
	log, logs := testlog.New(slog.LevelDebug)
	d, err := daemon.New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(waitFor):
				t.Fatal("Run did not return after its context ended")
			}
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return d, logs, stop
}

func TestDaemonServesAndStops(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("# RESP users\nalice wonder\n\nbob builder\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.RequirePass = "sekret"
	cfg.UsersFile = users
	cfg.MaxClients = 100
	d, logs, stop := start(t, cfg)
	addr := d.RESPAddr().String()
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("RESPAddr = %s", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	for _, tc := range []struct {
		user, pass string
		wantErr    string
	}{
		{"", "sekret", ""},
		{"default", "sekret", ""},
		{"alice", "wonder", ""},
		{"bob", "builder", ""},
		{"", "wrong", "WRONGPASS"},
		{"alice", "builder", "WRONGPASS"},
		{"", "", "NOAUTH"},
	} {
		for _, proto := range []int{2, 3} {
			rdb := redis.NewClient(&redis.Options{Addr: addr, Username: tc.user, Password: tc.pass, Protocol: proto, MaxRetries: -1})
			r, err := rdb.Do(ctx, "CL.THROTTLE", "user:"+tc.user, 15, 30, 60).Int64Slice()
			rdb.Close()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s/%q RESP%d: %v, %v; want %s", tc.user, tc.pass, proto, r, err, tc.wantErr)
				}
				continue
			}
			if err != nil || len(r) != 5 || r[0] != 0 || r[1] != 16 {
				t.Errorf("%s/%q RESP%d: %v, %v", tc.user, tc.pass, proto, r, err)
			}
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "sekret"})
	defer rdb.Close()
	if cfg, err := rdb.ConfigGet(ctx, "maxclients").Result(); err != nil || cfg["maxclients"] != "100" {
		t.Errorf("CONFIG GET maxclients: %v, %v", cfg, err)
	}
	// The store is the daemon's: keys written over the wire are in it.
	if _, ok, err := d.Store().TTL(ctx, "user:alice"); err != nil || !ok {
		t.Errorf("the daemon's store lacks user:alice: %v, %v", ok, err)
	}

	held, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(waitFor))
	io.WriteString(held, "AUTH sekret\r\n")
	if line, err := bufio.NewReader(held).ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("AUTH: %q, %v", line, err)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The connection open at the end is closed.
	if rest, err := io.ReadAll(held); err != nil || len(rest) != 0 {
		t.Fatalf("a connection open when Run returned: read %q, %v; want it closed", rest, err)
	}
	if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		nc.Close()
		t.Fatal("the daemon still accepts connections after Run returned")
	}
	out := logs.String()
	for _, want := range []string{`msg="funnel started"`, "store=memory", "resp=" + addr, `msg="funnel stopping"`, `msg="funnel stopped"`} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"sekret", "wonder", "builder"} {
		if strings.Contains(out, secret) {
			t.Errorf("logs show a password:\n%s", out)
		}
	}
}

// TestDaemonGracefulShutdown sends a pipeline and ends the daemon's context
// at once: every command sent is answered before the connection closes.
func TestDaemonGracefulShutdown(t *testing.T) {
	t.Parallel()
	d, _, stop := start(t, testConfig())
	nc, err := net.DialTimeout("tcp", d.RESPAddr().String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	// The connection is accepted (one still in the listener's queue when
	// the daemon stops is refused, as with any server).
	nc.SetDeadline(time.Now().Add(waitFor))
	io.WriteString(nc, "PING\r\n")
	if line, err := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("PING: %q, %v", line, err)
	}
	const n = 1000
	var pipeline strings.Builder
	for range n {
		pipeline.WriteString("*5\r\n$11\r\nCL.THROTTLE\r\n$4\r\ngone\r\n$3\r\n999\r\n$1\r\n1\r\n$1\r\n1\r\n")
	}
	if _, err := io.WriteString(nc, pipeline.String()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	for i := range n {
		var head string
		for range 6 { // *5 and five integers
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			head += line
		}
		if !strings.HasPrefix(head, "*5\r\n:0\r\n:1000\r\n") {
			t.Fatalf("reply %d: %q", i, head)
		}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the replies: %q, %v; want the connection closed", rest, err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestDaemonNewErrors(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	locked := redistest.StartServer(t, "--requirepass", "s3cret")
	down := redistest.StartServer(t)
	down.Stop()
	dir := t.TempDir()
	badUsers := filepath.Join(dir, "bad")
	os.WriteFile(badUsers, []byte("alice\n"), 0o600)
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		want   string
		is     error
	}{
		{"Invalid", func(c *config.Config) { c.MaxClients = -1 }, "max_clients -1 is negative", config.ErrInvalid},
		{"BadRedisURL", func(c *config.Config) { c.Store = "redis://u:hunter2@127.0.0.1:1/db" }, "redis://u:xxxxx@127.0.0.1:1/db", nil},
		{"NoUsersFile", func(c *config.Config) { c.UsersFile = filepath.Join(dir, "missing") }, "no such file", nil},
		{"BadUsersFile", func(c *config.Config) { c.UsersFile = badUsers }, `want "name password"`, config.ErrInvalid},
		{"PortInUse", func(c *config.Config) { c.RESP = busy.Addr().String() }, "address already in use", nil},
		{"RedisWrongPassword", func(c *config.Config) { c.Store = "redis://:hunter2@" + locked.Addr + "/0" }, "WRONGPASS", funnel.ErrUnavailable},
		{"RedisMissingDB", func(c *config.Config) { c.Store = "redis://:s3cret@" + locked.Addr + "/99" }, "DB index is out of range", funnel.ErrUnavailable},
		{"RedisDown", func(c *config.Config) { c.Store = "redis://" + down.Addr }, "connection refused", funnel.ErrUnavailable},
		{"SentinelDown", func(c *config.Config) {
			c.Store = "redis-sentinel://u:hunter2@" + down.Addr + "/mymaster?sentinel_password=hunter2"
		}, "redis-sentinel://u:xxxxx@" + down.Addr + "/mymaster?sentinel_password=xxxxx", nil},
		{"BadSentinelURL", func(c *config.Config) { c.Store = "redis-sentinel://u:hunter2@127.0.0.1:1/" }, "the path names the master", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.change(&cfg)
			d, err := daemon.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err == nil {
				d.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("New: %v; want %q (%v)", err, tc.want, tc.is)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the store's password: %v", err)
			}
		})
	}
}

// TestDaemonHTTP: the HTTP API answers decisions on the daemon's store, which
// RESP shares, and serves health, readiness and metrics.
func TestDaemonHTTP(t *testing.T) {
	t.Parallel()
	d, _, stop := start(t, testConfig())
	base := "http://" + d.HTTPAddr().String()
	rdb := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if r, err := rdb.Do(ctx, "CL.THROTTLE", "k", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r, []int64{0, 2, 1, -1, 60}) {
		t.Fatalf("CL.THROTTLE: %v, %v", r, err)
	}
	post := func(body string) (int, string) {
		t.Helper()
		res, err := http.Post(base+"/v1/throttle", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	// The same key, the same limit: the second unit of the burst, then none.
	limit := `"limit":{"count":1,"period":"60s","burst":1}`
	if code, body := post(`{"key":"k",` + limit + `}`); code != 200 || !strings.Contains(body, `"allowed":true`) || !strings.Contains(body, `"remaining":0`) {
		t.Fatalf("POST /v1/throttle: %d %s", code, body)
	}
	if code, body := post(`{"key":"k",` + limit + `}`); code != 429 || !strings.Contains(body, `"allowed":false`) {
		t.Fatalf("POST /v1/throttle, over the limit: %d %s", code, body)
	}
	get := func(path string) (int, string) {
		t.Helper()
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if r, err := rdb.Do(ctx, "FUNNEL.CHARGE", "c", "gcra", 1, 60000, "QUANTITY", 3).Int64Slice(); err != nil || r[0] != 0 {
		t.Fatalf("FUNNEL.CHARGE into debt: %v, %v", r, err)
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, `funnel_decisions_total{outcome="refused",rule="http"} 1`) ||
		!strings.Contains(body, `funnel_resp_costs_total{kind="charge_in_debt"} 1`) ||
		!strings.Contains(body, `funnel_connected_clients{protocol="resp"} 1`) ||
		!strings.Contains(body, `funnel_resp_decisions_total{outcome="allowed"} 1`) ||
		!strings.Contains(body, "funnel_store_evicted_keys_total 0") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// With Redis gone, RESP answers fail-closed fallbacks with TRYAGAIN (never
// a reply that looks like a decision) and fail-open ones as allowed, and
// /metrics counts both; a fail-open daemon starts while Redis is down.
func TestDaemonRESPFallbacks(t *testing.T) {
	t.Parallel()
	metricsOf := func(d *daemon.Daemon) string {
		t.Helper()
		res, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()

	srv := redistest.StartServer(t)
	cfg := testConfig()
	// Redis up must answer however loaded the machine (the default 100 ms
	// fell back once); Redis down refuses connections at once.
	cfg.Store, cfg.StoreTimeout = "redis://"+srv.Addr, 5*time.Second
	closed, _, _ := start(t, cfg)
	rdb := redis.NewClient(&redis.Options{Addr: closed.RESPAddr().String(), MaxRetries: -1})
	defer rdb.Close()
	if r, err := rdb.Do(ctx, "CL.THROTTLE", "k", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r, []int64{0, 2, 1, -1, 60}) {
		t.Fatalf("CL.THROTTLE with Redis up: %v, %v", r, err)
	}
	srv.Stop()
	if _, err := rdb.Do(ctx, "CL.THROTTLE", "k", 1, 1, 60).Result(); err == nil || !strings.HasPrefix(err.Error(), "TRYAGAIN ") {
		t.Fatalf("CL.THROTTLE with Redis down, fail-closed: %v", err)
	}
	if m := metricsOf(closed); !strings.Contains(m, `funnel_resp_decisions_total{outcome="fallback"} 1`) ||
		!strings.Contains(m, `funnel_resp_decisions_total{outcome="refused"} 0`) ||
		!strings.Contains(m, `funnel_fail_open_total{rule="resp"} 0`) {
		t.Errorf("/metrics, fail-closed:\n%s", m)
	}

	cfg = testConfig()
	cfg.Store, cfg.FailOpen = "redis://"+srv.Addr, true
	open, _, _ := start(t, cfg)
	rdb2 := redis.NewClient(&redis.Options{Addr: open.RESPAddr().String(), MaxRetries: -1})
	defer rdb2.Close()
	if r, err := rdb2.Do(ctx, "CL.THROTTLE", "k", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r, []int64{0, 2, 2, -1, -1}) {
		t.Fatalf("CL.THROTTLE with Redis down, fail-open: %v, %v", r, err)
	}
	if m := metricsOf(open); !strings.Contains(m, `funnel_resp_decisions_total{outcome="fallback"} 1`) ||
		!strings.Contains(m, `funnel_fail_open_total{rule="resp"} 1`) {
		t.Errorf("/metrics, fail-open:\n%s", m)
	}
}
