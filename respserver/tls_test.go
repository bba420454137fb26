package respserver_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel/internal/testcerts"
	"github.com/funnelrl/funnel/respserver"
)

// testTLS is a server certificate for 127.0.0.1, made for a test, and a
// pool of the CA that signed it.
type testTLS struct {
	server *tls.Config
	roots  *x509.CertPool
}

func newTestTLS(t testing.TB) testTLS {
	t.Helper()
	ca := testcerts.NewCA(t, "funnel-test-ca")
	return testTLS{
		server: &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "funnel-test").TLS(t)}},
		roots:  ca.Pool(),
	}
}

// client returns the configuration of a client that trusts the server.
func (x testTLS) client() *tls.Config { return &tls.Config{RootCAs: x.roots} }

// startTLSServer starts a server configured by cfg on a TLS listener of
// 127.0.0.1:0.
func startTLSServer(t *testing.T, x testTLS, cfg respserver.Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startServerOn(t, tls.NewListener(ln, x.server), cfg)
}

// dialTLS is dial over TLS.
func (ts *testServer) dialTLS(t *testing.T, x testTLS) *client {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", ts.addr, x.client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// Over a TLS listener, go-redis authenticates and is served, with either
// event-loop setting; a client that speaks plain RESP gets no reply.
func TestTLS(t *testing.T) {
	t.Parallel()
	x := newTestTLS(t)
	ts := startTLSServer(t, x, respserver.Config{Password: "sekret"})
	ctx := testContext(t)
	for _, proto := range []int{2, 3} {
		rdb := ts.goRedis(t, redis.Options{TLSConfig: x.client(), Password: "sekret", Protocol: proto})
		if r, err := rdb.Do(ctx, "CL.THROTTLE", "tls", 1, 1, 60).Int64Slice(); err != nil || len(r) != 5 || r[0] != 0 {
			t.Fatalf("RESP%d CL.THROTTLE over TLS: %v, %v", proto, r, err)
		}
		bad := ts.goRedis(t, redis.Options{TLSConfig: x.client(), Password: "wrong", Protocol: proto})
		if err := bad.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Fatalf("RESP%d, a wrong password over TLS: %v", proto, err)
		}
	}
	c := ts.dial(t)
	c.send("PING\r\n")
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	b, _ := io.ReadAll(c.br) // a TLS alert, or nothing, then the end
	if strings.Contains(string(b), "PONG") {
		t.Fatalf("plain RESP was answered over a TLS listener: %q", b)
	}
}

// A client that connects and sends no hello is disconnected after
// HandshakeTimeout, and holds no slot of MaxClients after that; Shutdown
// does not wait for one either.
func TestTLSHandshakeTimeout(t *testing.T) {
	t.Parallel()
	x := newTestTLS(t)
	// Long enough for the TLS client's own handshake on a loaded machine
	// under -race (50 ms was not, once), short beside waitFor.
	ts := startTLSServer(t, x, respserver.Config{HandshakeTimeout: time.Second, MaxClients: 1})
	mute := ts.dial(t) // plain TCP: it never says hello
	start := time.Now()
	mute.expectClosed("")
	if d := time.Since(start); d > waitFor/2 {
		t.Fatalf("closed after %v", d)
	}
	// The slot is free again: a TLS client is served. (Stats count the
	// mute client until its goroutine ends, just after the close.)
	deadline := time.Now().Add(waitFor)
	for ts.srv.Stats().Clients != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the mute client still counts")
		}
		time.Sleep(time.Millisecond) // polls the server's counter
	}
	if got := ts.dialTLS(t, x).do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}

	// A server with the default timeout shuts down at once, with a mute
	// client connected.
	ts2 := startTLSServer(t, x, respserver.Config{})
	mute2 := ts2.dial(t)
	served := ts2.dialTLS(t, x)
	if got := served.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), respserver.DefaultHandshakeTimeout/2)
	defer cancel()
	if err := ts2.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a client in its handshake: %v", err)
	}
	mute2.expectClosed("")
	served.expectClosed("")
}

// Over TLS, Shutdown answers every command a client has sent before it
// closes the connection.
func TestTLSShutdownDrains(t *testing.T) {
	t.Parallel()
	x := newTestTLS(t)
	ts := startTLSServer(t, x, respserver.Config{})
	c := ts.dialTLS(t, x)
	if got := c.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	// One write of 20 KB: more than a TLS record, and more than the
	// server's first read of it, so that crypto/tls holds some of it when
	// the server has answered the start.
	const n = 400
	c.send(strings.Repeat(multibulk("CL.THROTTLE", "drain", "999", "1", "1"), n) + multibulk("ECHO", "after"))
	// The server has read the start of the pipeline before Shutdown.
	if got := c.read(); !strings.HasPrefix(got, "*5\r\n") {
		t.Fatalf("first reply %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if got := c.read(); !strings.HasPrefix(got, "*5\r\n") {
			t.Fatalf("reply %d: %q", i, got)
		}
	}
	if got := c.read(); got != "$5\r\nafter\r\n" {
		t.Fatalf("ECHO: %q", got)
	}
	c.expectClosed("")
}

// Over TLS, a client over MaxClients is told so once its handshake is done,
// and a mute client over it does not hold up the accept loop.
func TestTLSMaxClients(t *testing.T) {
	t.Parallel()
	x := newTestTLS(t)
	ts := startTLSServer(t, x, respserver.Config{MaxClients: 1})
	first := ts.dialTLS(t, x)
	if got := first.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
	ts.dial(t) // mute, over the bound
	over := ts.dialTLS(t, x)
	over.expectClosed("-ERR max number of clients reached\r\n")
	if got := first.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING: %q", got)
	}
}
