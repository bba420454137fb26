package daemon_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/daemon"
)

// rawDial opens a TCP connection to addr that sends nothing.
func rawDial(t testing.TB, addr net.Addr) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr.String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// closedByServer reads from nc, answering the pings of an HTTP/2 server
// when h2 is set, until the server closes the connection; it fails the test
// after waitFor. It returns the HTTP/2 frame types the server sent (nil
// without h2).
func closedByServer(t testing.TB, nc net.Conn, h2 bool) []byte {
	t.Helper()
	nc.SetDeadline(time.Now().Add(waitFor))
	var err error
	var frames []byte
	if !h2 {
		_, err = io.Copy(io.Discard, nc)
	} else {
		frames, err = readFrames(nc)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server left the connection open for %v", waitFor)
	}
	return frames
}

// http2Preface is what an HTTP/2 client sends first: the preface and an
// empty SETTINGS frame.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// readFrames reads HTTP/2 frames from nc until it ends, acknowledging the
// PING frames (as a client that is alive does), and returns their types.
func readFrames(nc net.Conn) ([]byte, error) {
	br := bufio.NewReader(nc)
	var types []byte
	for {
		var head [9]byte
		if _, err := io.ReadFull(br, head[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				err = nil
			}
			var oe *net.OpError
			if errors.As(err, &oe) && !oe.Timeout() {
				err = nil // reset
			}
			return types, err
		}
		n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return types, nil
		}
		types = append(types, head[3])
		const ping, ack = 0x6, 0x1
		if head[3] == ping && head[4]&ack == 0 {
			var f [9]byte
			binary.BigEndian.PutUint32(f[:4], uint32(len(payload))<<8|ping)
			f[4] = ack
			nc.Write(append(f[:], payload...))
		}
	}
}

// TestDaemonGRPCHandshakeTimeout opens TCP connections to the gRPC port that
// send nothing: the server closes them after handshake_timeout (gRPC's own
// default held them 120 s).
func TestDaemonGRPCHandshakeTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.HandshakeTimeout = 200 * time.Millisecond
	d, _, _ := start(t, cfg)
	closedByServer(t, rawDial(t, d.GRPCAddr()), false)
	// Over TLS, a client that never sends its hello.
	s := startSecured(t, nil, func(c *config.Config) { c.HandshakeTimeout = 200 * time.Millisecond })
	closedByServer(t, rawDial(t, s.d.GRPCAddr()), false)
}

// TestDaemonGRPCIdleConnection completes the HTTP/2 preface on the gRPC port
// and makes no call, under credentials (which gRPC checks per call): the
// server sends GOAWAY after grpc_idle_timeout and closes the connection
// (before, it was never closed).
func TestDaemonGRPCIdleConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RequirePass = "sekret"
	cfg.GRPCIdleTimeout = 200 * time.Millisecond
	d, _, _ := start(t, cfg)
	nc := rawDial(t, d.GRPCAddr())
	if _, err := io.WriteString(nc, http2Preface); err != nil {
		t.Fatal(err)
	}
	frames := closedByServer(t, nc, true)
	const goAway = 0x7
	if !strings.Contains(string(frames), string(rune(goAway))) {
		t.Fatalf("the server closed without GOAWAY; frames %v", frames)
	}
}

// TestDaemonAuthTimeout: a RESP socket that never authenticates is closed
// after auth_timeout, under requirepass; a client that authenticated stays.
func TestDaemonAuthTimeout(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.RequirePass = "sekret"
	cfg.AuthTimeout = 200 * time.Millisecond
	d, _, _ := start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: d.RESPAddr().String(), Password: "sekret", PoolSize: 1})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	closedByServer(t, rawDial(t, d.RESPAddr()), false)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the authenticated client, after the timeout: %v", err)
	}
}

// probe says whether each listener of d serves a new client now: RESP a
// PING, HTTP /healthz, gRPC a ShouldRateLimit.
type probe struct {
	t    testing.TB
	resp net.Addr
	http net.Addr
	grpc net.Addr
	pass string
}

func (p probe) respOK() error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: p.resp.String(), Password: p.pass, PoolSize: 1, MaxRetries: -1})
	defer rdb.Close()
	return rdb.Ping(ctx).Err()
}

func (p probe) httpOK() error {
	c := &http.Client{Timeout: waitFor, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + p.http.String() + "/healthz")
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Errorf("/healthz: %s", res.Status)
	}
	return nil
}

func (p probe) grpcOK() error {
	conn, err := grpc.NewClient(p.grpc.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if p.pass != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+p.pass)
	}
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "probe"}}}},
	}, grpc.WaitForReady(false))
	return err
}

// accepted reports whether a raw connection to a listener is served: gRPC
// sends its SETTINGS first; HTTP answers a request on it; RESP a PING.
func accepted(t testing.TB, name string, nc net.Conn) bool {
	t.Helper()
	nc.SetDeadline(time.Now().Add(waitFor))
	switch name {
	case "http":
		io.WriteString(nc, "GET /healthz HTTP/1.1\r\nHost: funnel\r\n\r\n")
	case "resp":
		io.WriteString(nc, "PING\r\n")
	}
	var b [1]byte
	_, err := nc.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: neither served nor closed after %v", name, waitFor)
	}
	if name == "resp" && b[0] == '-' {
		return false // -ERR max number of clients reached
	}
	nc.SetDeadline(time.Time{})
	return err == nil
}

// TestDaemonConnCaps fills each listener's bound with idle connections, in
// turn: the next connection to it is refused at once, while the other
// listeners serve new clients; then it fills the process's bound, which
// refuses connections on every listener. The refusals are counted in
// /metrics.
func TestDaemonConnCaps(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxClients, cfg.HTTPMaxConns, cfg.GRPCMaxConns, cfg.MaxConns = 3, 3, 3, 20
	cfg.HandshakeTimeout = time.Hour // the idle connections stay for the test
	var d *daemon.Daemon
	for _, name := range []string{"grpc", "http", "resp"} {
		// A daemon each, so that the probes of one listener hold no
		// place of the next.
		d, _, _ = start(t, cfg)
		p := probe{t: t, resp: d.RESPAddr(), http: d.HTTPAddr(), grpc: d.GRPCAddr()}
		addrs := map[string]net.Addr{"resp": d.RESPAddr(), "http": d.HTTPAddr(), "grpc": d.GRPCAddr()}
		for i := range 3 {
			if !accepted(t, name, rawDial(t, addrs[name])) {
				t.Fatalf("%s: connection %d of 3 refused", name, i+1)
			}
		}
		if accepted(t, name, rawDial(t, addrs[name])) {
			t.Fatalf("%s: a fourth connection over a bound of 3 was served", name)
		}
		for other, f := range map[string]func() error{"resp": p.respOK, "http": p.httpOK, "grpc": p.grpcOK} {
			if other == name {
				continue
			}
			if err := f(); err != nil {
				t.Fatalf("with %s full, a new %s client: %v", name, other, err)
			}
		}
	}
	// The process's bound: 20 connections over listeners of 10 each.
	cfg2 := testConfig()
	cfg2.MaxClients, cfg2.HTTPMaxConns, cfg2.GRPCMaxConns, cfg2.MaxConns = 10, 10, 10, 20
	cfg2.HandshakeTimeout = time.Hour
	d2, _, _ := start(t, cfg2)
	addrs2 := map[string]net.Addr{"resp": d2.RESPAddr(), "http": d2.HTTPAddr(), "grpc": d2.GRPCAddr()}
	var held []net.Conn
	for i := range 20 {
		name := []string{"resp", "grpc"}[i%2]
		nc := rawDial(t, addrs2[name])
		if !accepted(t, name, nc) {
			t.Fatalf("connection %d of the process's 20 (%s) refused", i+1, name)
		}
		held = append(held, nc)
	}
	for _, name := range []string{"resp", "http", "grpc"} {
		if accepted(t, name, rawDial(t, addrs2[name])) {
			t.Fatalf("%s: a connection over the process's bound was served", name)
		}
	}
	// The refusals are counted, once places are free to ask.
	for _, nc := range held {
		nc.Close()
	}
	// At least one refusal each: a /metrics request that comes before
	// the server has seen the held connections close is refused too (it
	// was, once, on a loaded machine: the count was then 2).
	want := []*regexp.Regexp{
		regexp.MustCompile(`funnel_connections_refused_total\{listener="grpc"\} [1-9]`),
		regexp.MustCompile(`funnel_connections_refused_total\{listener="http"\} [1-9]`),
		regexp.MustCompile(`funnel_connections_refused_total\{listener="resp"\} [1-9]`),
		regexp.MustCompile(`funnel_connected_clients\{protocol="grpc"\}`),
	}
	poll(t, "the refusals in /metrics", func() bool {
		res, err := http.Get("http://" + d2.HTTPAddr().String() + "/metrics")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, w := range want {
			if !w.Match(body) {
				return false
			}
		}
		return true
	})
}

// poll waits for cond, failing the test after waitFor.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitFor); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, waitFor)
		}
	}
}
