package daemon_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/testcerts"
	"github.com/funnelrl/funnel/internal/testlog"
)

// The credentials of the secured daemons: the default user's password and
// alice's. Neither may appear in a log.
const (
	pass      = "s3cret"
	alicePass = "wonder"
)

// secured is a daemon that takes credentials over TLS, and the files it
// reads.
type secured struct {
	d    *daemon.Daemon
	logs *testlog.Buffer
	dir  string
	ca   *testcerts.CA // the server certificate's CA
	// The files of the server's certificate, its key and its CA.
	certFile, keyFile, caFile string
}

// startSecured starts a daemon over TLS, with the server certificate
// "funnel-1", the credentials above, Envoy's rate-limit service with a
// limit of 2 a minute for the descriptor "user", and, when clientCA is not
// nil, client certificates of clientCA required. change, when not nil,
// changes the configuration first.
func startSecured(t *testing.T, clientCA *testcerts.CA, change func(*config.Config)) *secured {
	t.Helper()
	s := &secured{dir: t.TempDir(), ca: testcerts.NewCA(t, "funnel-ca")}
	s.certFile, s.keyFile = s.ca.Server(t, "funnel-1").Write(t, s.dir, "tls")
	s.caFile = s.ca.Write(t, s.dir, "ca")
	users, rules := filepath.Join(s.dir, "users"), filepath.Join(s.dir, "rules.yaml")
	writeFile(t, users, []byte("alice "+alicePass+"\n"))
	writeFile(t, rules, []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n"))
	cfg := testConfig()
	cfg.RequirePass, cfg.UsersFile, cfg.Rules = pass, users, rules
	cfg.TLSCert, cfg.TLSKey = s.certFile, s.keyFile
	if clientCA != nil {
		cfg.TLSCA = clientCA.Write(t, s.dir, "client-ca")
	}
	if change != nil {
		change(&cfg)
	}
	s.d, s.logs, _ = start(t, cfg)
	return s
}

// clientTLS returns the configuration of a Go client that trusts the
// server, with cert when it is not nil.
func (s *secured) clientTLS(t *testing.T, cert *testcerts.Pair, nextProtos ...string) *tls.Config {
	t.Helper()
	cfg := &tls.Config{RootCAs: s.ca.Pool(), NextProtos: nextProtos}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS(t)}
	}
	return cfg
}

// checkNoSecrets checks that the daemon's logs show no password.
func (s *secured) checkNoSecrets(t *testing.T) {
	t.Helper()
	out := s.logs.String()
	for _, secret := range []string{pass, alicePass} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs show a password:\n%s", out)
		}
	}
}

// goRedis returns a go-redis client of the daemon's RESP listener over
// tlsCfg (nil: plain TCP), with opt's credentials.
func (s *secured) goRedis(t *testing.T, tlsCfg *tls.Config, opt redis.Options) *redis.Client {
	t.Helper()
	opt.Addr = s.d.RESPAddr().String()
	opt.TLSConfig = tlsCfg
	opt.MaxRetries = -1
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = waitFor, waitFor, waitFor
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// curlReply is what curl printed: the status (0 when curl failed), the
// HTTP version, the header fields and the body.
type curlReply struct {
	status  int
	version string
	out     string // all that curl printed, headers and body
	code    int    // curl's exit code
}

// curlStatus is how curl's -w writes the status and the HTTP version.
var curlStatus = regexp.MustCompile(`\n@@(\d+) ([\d.]+)@@`)

// curl runs curl with args, and the status and version written last.
func curl(t *testing.T, args ...string) curlReply {
	t.Helper()
	out, code := tool(t, "curl", append([]string{"-sS", "-D", "-", "-w", "\n@@%{http_code} %{http_version}@@"}, args...)...)
	r := curlReply{out: out, code: code}
	if m := curlStatus.FindStringSubmatch(out); code == 0 && m != nil {
		r.status, _ = strconv.Atoi(m[1])
		r.version = m[2]
	}
	return r
}

// rlsClient calls Envoy's rate-limit service of d.
type rlsClient struct {
	t    *testing.T
	conn *grpc.ClientConn
}

func newRLSClient(t *testing.T, d *daemon.Daemon, creds credentials.TransportCredentials) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr().String(), grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rlsClient{t: t, conn: conn}
}

// ask asks for a unit of the descriptor user=value, with the
// authorization metadata auth (none when empty), and returns the answer's
// code or the call's error.
func (c *rlsClient) ask(value, auth string) (rlsv3.RateLimitResponse_Code, error) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	res, err := rlsv3.NewRateLimitServiceClient(c.conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: value}},
		}},
	})
	if err != nil {
		return 0, err
	}
	return res.OverallCode, nil
}

// health calls the health service without metadata.
func (c *rlsClient) health() error {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	res, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err == nil && res.Status != healthpb.HealthCheckResponse_SERVING {
		err = errors.New(res.Status.String())
	}
	return err
}

func bearer(p string) string { return "Bearer " + p }

func basicAuth(user, p string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+p))
}

// TestDaemonTLSCredentials: over TLS, every listener serves clients that
// give the credentials (redis-cli, go-redis, curl, a gRPC client), refuses
// those that give none or wrong ones without changing anything, leaves
// health open, and serves a rotated certificate to new connections.
func TestDaemonTLSCredentials(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil, nil)
	ctx := context.Background()

	t.Run("RESP/redis-cli", func(t *testing.T) {
		cli := redisCLI(t, s.d.RESPAddr().String())
		overTLS := func(args ...string) string {
			out, _ := cli(append([]string{"--tls", "--cacert", s.caFile}, args...)...)
			return out
		}
		if out := overTLS("-a", pass, "CL.THROTTLE", "cli", "1", "1", "60"); out != "0\n2\n1\n-1\n60\n" {
			t.Fatalf("redis-cli --tls -a: %q", out)
		}
		for _, tc := range []struct {
			auth []string
			want []string
		}{
			{nil, []string{"NOAUTH"}},
			{[]string{"-a", "wrong"}, []string{"WRONGPASS", "NOAUTH"}},
			{[]string{"--user", "alice", "--pass", pass}, []string{"WRONGPASS", "NOAUTH"}},
		} {
			out := overTLS(append(tc.auth, "CL.THROTTLE", "cli", "1", "1", "60")...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("redis-cli --tls %q: %q, want %s", tc.auth, out, w)
				}
			}
		}
		// The refused commands charged nothing: alice takes the second
		// unit of the burst.
		if out := overTLS("--user", "alice", "--pass", alicePass, "CL.THROTTLE", "cli", "1", "1", "60"); !strings.HasPrefix(out, "0\n2\n0\n-1\n") {
			t.Fatalf("redis-cli --tls --user alice: %q", out)
		}
		if out, _ := cli("-a", pass, "CL.THROTTLE", "cli", "1", "1", "60"); strings.HasPrefix(out, "0\n") || strings.HasPrefix(out, "1\n") {
			t.Fatalf("redis-cli without --tls was answered: %q", out)
		}
	})

	t.Run("RESP/go-redis", func(t *testing.T) {
		good := s.goRedis(t, s.clientTLS(t, nil), redis.Options{Password: pass})
		if r, err := good.Do(ctx, "CL.THROTTLE", "gr", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r, []int64{0, 2, 1, -1, 60}) {
			t.Fatalf("CL.THROTTLE: %v, %v", r, err)
		}
		for _, tc := range []struct {
			opt  redis.Options
			want string
		}{
			{redis.Options{}, "NOAUTH"},
			{redis.Options{Password: "wrong"}, "WRONGPASS"},
			{redis.Options{Username: "alice", Password: pass}, "WRONGPASS"},
		} {
			for _, proto := range []int{2, 3} {
				tc.opt.Protocol = proto
				_, err := s.goRedis(t, s.clientTLS(t, nil), tc.opt).Do(ctx, "CL.THROTTLE", "gr", 1, 1, 60).Result()
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%+v: %v, want %s", tc.opt, err, tc.want)
				}
			}
		}
		alice := s.goRedis(t, s.clientTLS(t, nil), redis.Options{Username: "alice", Password: alicePass, Protocol: 3})
		if r, err := alice.Do(ctx, "CL.THROTTLE", "gr", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r[:4], []int64{0, 2, 0, -1}) {
			t.Fatalf("CL.THROTTLE as alice, after the refused ones: %v, %v", r, err)
		}
		if err := s.goRedis(t, nil, redis.Options{Password: pass}).Ping(ctx).Err(); err == nil {
			t.Fatal("a client without TLS was served")
		}
	})

	t.Run("HTTP/curl", func(t *testing.T) {
		base := "https://" + s.d.HTTPAddr().String()
		call := func(method, path, auth, body string) curlReply {
			t.Helper()
			args := []string{"--cacert", s.caFile, "-X", method, base + path}
			if auth != "" {
				args = append(args, "-H", "Authorization: "+auth)
			}
			if body != "" {
				args = append(args, "-H", "Content-Type: application/json", "--data", body)
			}
			r := curl(t, args...)
			if r.code != 0 {
				t.Fatalf("curl %s %s: exit %d\n%s", method, path, r.code, r.out)
			}
			if r.version != "2" {
				t.Errorf("curl %s %s: HTTP/%s, want HTTP/2", method, path, r.version)
			}
			return r
		}
		refused := func(method, path, auth, body, detail string) {
			t.Helper()
			r := call(method, path, auth, body)
			if r.status != 401 || !strings.Contains(r.out, "www-authenticate: Bearer realm=\"funnel\"") ||
				!strings.Contains(r.out, "application/problem+json") || !strings.Contains(r.out, detail) {
				t.Errorf("%s %s with %q: %d\n%s", method, path, auth, r.status, r.out)
			}
		}
		// Two units at once, one unit each.
		two := `{"key":"hc","limit":{"count":2,"period":"60s"}}`
		if r := call("POST", "/v1/throttle", bearer(pass), two); r.status != 200 || !strings.Contains(r.out, `"remaining":1`) {
			t.Fatalf("POST /v1/throttle: %d\n%s", r.status, r.out)
		}
		refused("POST", "/v1/throttle", "", two, "credentials are required")
		refused("POST", "/v1/throttle", bearer("wrong"), two, "invalid username-password pair")
		refused("POST", "/v1/throttle", basicAuth("alice", pass), two, "invalid username-password pair")
		refused("POST", "/v1/throttle", "Token "+pass, two, "not Bearer or Basic")
		if r := call("POST", "/v1/throttle", basicAuth("alice", alicePass), two); r.status != 200 || !strings.Contains(r.out, `"remaining":0`) {
			t.Fatalf("POST /v1/throttle as alice, after the refused ones: %d\n%s", r.status, r.out)
		}
		refused("DELETE", "/v1/keys/hc", "", "", "credentials are required")
		refused("DELETE", "/v1/keys/hc", bearer("wrong"), "", "invalid")
		if r := call("DELETE", "/v1/keys/hc", bearer(pass), ""); r.status != 200 || !strings.Contains(r.out, `{"existed":true}`) {
			t.Fatalf("DELETE /v1/keys/hc after the refused ones: %d\n%s", r.status, r.out)
		}
		ban := `{"key":"hb","limit":{"count":1,"period":"60s","ban":"60s"}}`
		call("POST", "/v1/throttle", bearer(pass), ban)
		if r := call("POST", "/v1/throttle", bearer(pass), ban); r.status != 429 {
			t.Fatalf("POST /v1/throttle over the limit: %d\n%s", r.status, r.out)
		}
		refused("DELETE", "/v1/bans/hb", "", "", "credentials are required")
		refused("GET", "/v1/bans", "", "", "credentials are required")
		if r := call("DELETE", "/v1/bans/hb", bearer(pass), ""); r.status != 200 || !strings.Contains(r.out, `{"unbanned":true}`) {
			t.Fatalf("DELETE /v1/bans/hb after the refused ones: %d\n%s", r.status, r.out)
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if r := call("GET", path, "", ""); r.status != 200 {
				t.Errorf("GET %s without credentials: %d\n%s", path, r.status, r.out)
			}
		}
		refused("GET", "/metrics", "", "", "credentials are required")
		if r := call("GET", "/metrics", bearer(pass), ""); r.status != 200 || !strings.Contains(r.out, `funnel_tls_reloads_total{result="success"} 1`) {
			t.Errorf("GET /metrics: %d\n%s", r.status, r.out)
		}
		if r := curl(t, "http://"+s.d.HTTPAddr().String()+"/healthz"); r.status == 200 {
			t.Errorf("plain HTTP was served: %d\n%s", r.status, r.out)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		c := newRLSClient(t, s.d, credentials.NewTLS(s.clientTLS(t, nil)))
		if err := c.health(); err != nil {
			t.Fatalf("health without credentials: %v", err)
		}
		if code, err := c.ask("g", bearer(pass)); err != nil || code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit: %v, %v", code, err)
		}
		for _, auth := range []string{"", bearer("wrong"), basicAuth("alice", pass), pass} {
			if _, err := c.ask("g", auth); status.Code(err) != codes.Unauthenticated {
				t.Errorf("ShouldRateLimit with %q: %v, want Unauthenticated", auth, err)
			}
		}
		// Two a minute: alice's is the second, the refused calls charged
		// nothing.
		if code, err := c.ask("g", basicAuth("alice", alicePass)); err != nil || code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit as alice: %v, %v", code, err)
		}
		if code, err := c.ask("g", bearer(pass)); err != nil || code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("ShouldRateLimit, the third: %v, %v", code, err)
		}
		// Reflection tells the API: it takes credentials too.
		rctx, cancel := context.WithTimeout(ctx, waitFor)
		defer cancel()
		stream, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(rctx)
		if err == nil {
			stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("reflection without credentials: %v", err)
		}
		plain := newRLSClient(t, s.d, insecure.NewCredentials())
		if _, err := plain.ask("g", bearer(pass)); status.Code(err) != codes.Unavailable {
			t.Errorf("a client without TLS: %v, want Unavailable", err)
		}
	})

	t.Run("Rotation", func(t *testing.T) {
		addrs := map[string]*tls.Config{
			s.d.RESPAddr().String(): s.clientTLS(t, nil),
			s.d.HTTPAddr().String(): s.clientTLS(t, nil, "h2"),
			s.d.GRPCAddr().String(): s.clientTLS(t, nil, "h2"),
		}
		for addr, cfg := range addrs {
			if got := servedCert(t, addr, cfg); got != "funnel-1" {
				t.Fatalf("%s serves %q", addr, got)
			}
		}
		held := s.goRedis(t, s.clientTLS(t, nil), redis.Options{Password: pass, PoolSize: 1})
		if err := held.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}

		s.ca.Server(t, "funnel-2").Write(t, s.dir, "tls")
		if err := s.d.ReloadTLS(); err != nil {
			t.Fatalf("ReloadTLS: %v", err)
		}
		for addr, cfg := range addrs {
			if got := servedCert(t, addr, cfg); got != "funnel-2" {
				t.Errorf("after the rotation, %s serves %q", addr, got)
			}
		}
		if r := curl(t, "-v", "--cacert", s.caFile, "https://"+s.d.HTTPAddr().String()+"/healthz"); r.status != 200 || !strings.Contains(r.out, "CN=funnel-2") {
			t.Errorf("curl after the rotation: %d\n%s", r.status, r.out)
		}
		// A connection made before the rotation goes on.
		if err := held.Ping(ctx).Err(); err != nil {
			t.Errorf("a connection from before the rotation: %v", err)
		}

		// Files that do not load are refused; the last good ones stay.
		writeFile(t, s.certFile, []byte("-----BEGIN CERTIFICATE-----\nMIIB"))
		if err := s.d.ReloadTLS(); err == nil || !strings.Contains(err.Error(), s.certFile) {
			t.Fatalf("ReloadTLS of a broken certificate: %v", err)
		}
		for addr, cfg := range addrs {
			if got := servedCert(t, addr, cfg); got != "funnel-2" {
				t.Errorf("after a broken rotation, %s serves %q", addr, got)
			}
		}
		r := curl(t, "--cacert", s.caFile, "-H", "Authorization: "+bearer(pass), "https://"+s.d.HTTPAddr().String()+"/metrics")
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`funnel_tls_reloads_total\{result="success"\} [2-9]`),
			regexp.MustCompile(`funnel_tls_reloads_total\{result="failure"\} [1-9]`),
			regexp.MustCompile(`funnel_tls_certificate_expiry_timestamp_seconds \d`),
		} {
			if !want.MatchString(r.out) {
				t.Errorf("/metrics lacks %s:\n%s", want, r.out)
			}
		}
	})
	s.checkNoSecrets(t)
}

// TestDaemonMutualTLS: with a client CA, every listener refuses a client
// without a certificate, or with one another CA signed, before any
// command; credentials are still required of those with one.
func TestDaemonMutualTLS(t *testing.T) {
	t.Parallel()
	clientCA, otherCA := testcerts.NewCA(t, "client-ca"), testcerts.NewCA(t, "other-ca")
	s := startSecured(t, clientCA, func(c *config.Config) { c.MetricsOpen = true })
	app, stranger := clientCA.Client(t, "app"), otherCA.Client(t, "stranger")
	appCert, appKey := app.Write(t, s.dir, "app")
	strangerCert, strangerKey := stranger.Write(t, s.dir, "stranger")
	ctx := context.Background()

	t.Run("RESP/redis-cli", func(t *testing.T) {
		cli := redisCLI(t, s.d.RESPAddr().String())
		run := func(args ...string) string {
			out, _ := cli(append([]string{"--tls", "--cacert", s.caFile}, args...)...)
			return out
		}
		for _, certs := range [][]string{nil, {"--cert", strangerCert, "--key", strangerKey}} {
			if out := run(append(certs, "-a", pass, "CL.THROTTLE", "cli", "1", "1", "60")...); strings.HasPrefix(out, "0\n") || strings.HasPrefix(out, "1\n") {
				t.Errorf("redis-cli %q was answered: %q", certs, out)
			}
		}
		mine := []string{"--cert", appCert, "--key", appKey}
		if out := run(append(mine, "CL.THROTTLE", "cli", "1", "1", "60")...); !strings.Contains(out, "NOAUTH") {
			t.Errorf("redis-cli with a certificate and no password: %q", out)
		}
		if out := run(append(mine, "-a", pass, "CL.THROTTLE", "cli", "1", "1", "60")...); out != "0\n2\n1\n-1\n60\n" {
			t.Fatalf("redis-cli with a certificate and the password: %q", out)
		}
	})

	t.Run("RESP/go-redis", func(t *testing.T) {
		for name, cert := range map[string]*testcerts.Pair{"none": nil, "another CA's": &stranger} {
			if err := s.goRedis(t, s.clientTLS(t, cert), redis.Options{Password: pass}).Ping(ctx).Err(); err == nil {
				t.Errorf("a client with %s certificate was served", name)
			}
		}
		rdb := s.goRedis(t, s.clientTLS(t, &app), redis.Options{Password: pass})
		if r, err := rdb.Do(ctx, "CL.THROTTLE", "gr", 1, 1, 60).Int64Slice(); err != nil || !slices.Equal(r, []int64{0, 2, 1, -1, 60}) {
			t.Fatalf("CL.THROTTLE: %v, %v", r, err)
		}
	})

	t.Run("HTTP/curl", func(t *testing.T) {
		base := "https://" + s.d.HTTPAddr().String()
		two := `{"key":"hc","limit":{"count":2,"period":"60s"}}`
		post := func(cert []string, auth string) curlReply {
			t.Helper()
			args := append([]string{"--cacert", s.caFile, "-H", "Content-Type: application/json", "--data", two}, cert...)
			if auth != "" {
				args = append(args, "-H", "Authorization: "+auth)
			}
			return curl(t, append(args, base+"/v1/throttle")...)
		}
		mine := []string{"--cert", appCert, "--key", appKey}
		for _, cert := range [][]string{nil, {"--cert", strangerCert, "--key", strangerKey}} {
			if r := post(cert, bearer(pass)); r.code == 0 {
				t.Errorf("curl %q was answered: %d\n%s", cert, r.status, r.out)
			}
			if r := curl(t, append([]string{"--cacert", s.caFile, base + "/healthz"}, cert...)...); r.code == 0 {
				t.Errorf("curl %q /healthz was answered: %d\n%s", cert, r.status, r.out)
			}
		}
		if r := post(mine, ""); r.status != 401 {
			t.Errorf("curl with a certificate and no credentials: %d\n%s", r.status, r.out)
		}
		if r := post(mine, bearer(pass)); r.status != 200 || !strings.Contains(r.out, `"remaining":1`) {
			t.Fatalf("curl with a certificate and the password: %d\n%s", r.status, r.out)
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} { // metrics_open
			if r := curl(t, append([]string{"--cacert", s.caFile, base + path}, mine...)...); r.status != 200 {
				t.Errorf("GET %s with a certificate and no credentials: %d\n%s", path, r.status, r.out)
			}
		}
		// The refused handshakes are in the daemon's log, at debug level.
		if out := s.logs.String(); !strings.Contains(out, `level=DEBUG msg="http: TLS handshake error from 127.0.0.1:`) {
			t.Errorf("the log lacks the refused handshakes:\n%s", out)
		}
	})

	t.Run("gRPC", func(t *testing.T) {
		for name, cert := range map[string]*testcerts.Pair{"none": nil, "another CA's": &stranger} {
			c := newRLSClient(t, s.d, credentials.NewTLS(s.clientTLS(t, cert)))
			if _, err := c.ask("g", bearer(pass)); status.Code(err) != codes.Unavailable {
				t.Errorf("ShouldRateLimit with %s certificate: %v, want Unavailable", name, err)
			}
			if err := c.health(); status.Code(err) != codes.Unavailable {
				t.Errorf("health with %s certificate: %v, want Unavailable", name, err)
			}
		}
		c := newRLSClient(t, s.d, credentials.NewTLS(s.clientTLS(t, &app)))
		if err := c.health(); err != nil {
			t.Fatalf("health with a certificate: %v", err)
		}
		if _, err := c.ask("g", ""); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ShouldRateLimit with a certificate and no credentials: %v, want Unauthenticated", err)
		}
		// Two a minute: the refused calls charged nothing.
		for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			if code, err := c.ask("g", bearer(pass)); err != nil || code != want {
				t.Fatalf("ShouldRateLimit %d over mTLS: %v, %v; want %v", i, code, err, want)
			}
		}
	})
	s.checkNoSecrets(t)
}

// TestDaemonAuthWithoutTLS: the credentials guard HTTP and gRPC without
// TLS too, health aside.
func TestDaemonAuthWithoutTLS(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RequirePass = pass
	d, _, _ := start(t, cfg)
	base := "http://" + d.HTTPAddr().String()
	do := func(method, path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"DELETE", "/v1/keys/k", "", 401},
		{"DELETE", "/v1/keys/k", bearer("wrong"), 401},
		{"DELETE", "/v1/keys/k", bearer(pass), 200},
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", basicAuth("default", pass), 200},
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/nowhere", "", 401},
	} {
		if got := do(tc.method, tc.path, tc.auth); got != tc.want {
			t.Errorf("%s %s %q: %d, want %d", tc.method, tc.path, tc.auth, got, tc.want)
		}
	}
	c := newRLSClient(t, d, insecure.NewCredentials())
	if err := c.health(); err != nil {
		t.Errorf("health: %v", err)
	}
	if _, err := c.ask("g", ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("ShouldRateLimit without credentials: %v", err)
	}
	if code, err := c.ask("g", bearer(pass)); err != nil || code != rlsv3.RateLimitResponse_OK {
		t.Errorf("ShouldRateLimit: %v, %v", code, err)
	}
}

// TestDaemonTLSFiles: files that cannot serve TLS stop the daemon from
// starting, with the file and the reason.
func TestDaemonTLSFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Server(t, "funnel").Write(t, dir, "good")
	_, otherKey := ca.Server(t, "other").Write(t, dir, "other")
	cut := filepath.Join(dir, "cut.crt")
	good, _ := os.ReadFile(cert)
	writeFile(t, cut, good[:len(good)/2])
	notCA := filepath.Join(dir, "not-ca.crt")
	writeFile(t, notCA, []byte("no certificates here\n"))
	missing := filepath.Join(dir, "missing.crt")
	for _, tc := range []struct {
		name          string
		cert, key, ca string
		want          []string
	}{
		{"Missing", missing, key, "", []string{missing, "no such file or directory"}},
		{"CutShort", cut, key, "", []string{cut, "cut short"}},
		{"KeyMismatch", cert, otherKey, "", []string{cert, otherKey, "private key does not match public key"}},
		{"NotACA", cert, key, notCA, []string{notCA, "no certificate"}},
		{"KeyAlone", "", key, "", []string{"tls_key", "without tls_cert"}},
		{"CertAlone", cert, "", "", []string{"tls_cert", "without tls_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.TLSCert, cfg.TLSKey, cfg.TLSCA = tc.cert, tc.key, tc.ca
			d, err := daemon.New(cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				d.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v; want it to say %q", err, w)
				}
			}
		})
	}
}

// TestDaemonWarnsExposed: a listener beyond loopback is warned about at
// start when it takes no credentials, or takes them in clear text.
func TestDaemonWarnsExposed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	cert, key := ca.Server(t, "funnel").Write(t, dir, "tls")
	for _, tc := range []struct {
		name   string
		change func(*config.Config)
		want   string // "": no warning
	}{
		{"Open", func(*config.Config) {}, "takes no credentials"},
		{"ClearText", func(c *config.Config) { c.RequirePass = pass }, "clear text"},
		{"TLS", func(c *config.Config) { c.RequirePass, c.TLSCert, c.TLSKey = pass, cert, key }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.RESP, cfg.HTTP, cfg.GRPC = "0.0.0.0:0", "", ""
			tc.change(&cfg)
			_, logs, stop := start(t, cfg)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			out := logs.String()
			warned := strings.Contains(out, "level=WARN msg=\"a listener beyond loopback")
			if tc.want == "" && warned || tc.want != "" && !strings.Contains(out, tc.want) {
				t.Errorf("logs, want %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, pass) {
				t.Errorf("the logs show the password:\n%s", out)
			}
		})
	}
}
