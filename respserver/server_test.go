package respserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/eventually"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/funnelrl/funnel/storetest"
)

// waitFor bounds every wait of these tests for a reply or a condition.
const waitFor = 10 * time.Second

// testServer is a respserver.Server on 127.0.0.1:0 over a store whose clock is
// clock, so that replies are exact.
type testServer struct {
	addr  string
	srv   *respserver.Server
	store *memstore.Store // nil when the server is over another store
	clock *storetest.Clock
	errc  chan error // Serve's result
}

// quietLogger drops the server's logs; the tests check its replies.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startServer starts a server configured by cfg; it is closed when the test
// ends.
func startServer(t testing.TB, cfg respserver.Config) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return startServerOn(t, ln, cfg)
}

// startServerOn starts a server configured by cfg on ln; it is closed when
// the test ends.
func startServerOn(t testing.TB, ln net.Listener, cfg respserver.Config) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.EventLoops == 0 {
		cfg.EventLoops = testEventLoops
	}
	clock := storetest.NewClock(storetest.Epoch)
	st := memstore.New(memstore.Options{Now: clock.Now})
	ts := serveStore(t, ln, cfg, st, clock)
	ts.store = st
	t.Cleanup(func() { st.Close() })
	return ts
}

// serveStore starts a server configured by cfg on ln over st, whose clock is
// clock; it is closed when the test ends.
func serveStore(t testing.TB, ln net.Listener, cfg respserver.Config, st funnel.Store, clock *storetest.Clock) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	t.Logf("server on %s with Config.EventLoops %d", ln.Addr(), cfg.EventLoops)
	ts := &testServer{addr: ln.Addr().String(), srv: respserver.New(st, cfg), clock: clock, errc: make(chan error, 1)}
	go func() { ts.errc <- ts.srv.Serve(ln) }()
	t.Cleanup(func() {
		ts.srv.Close()
		select {
		case err := <-ts.errc:
			if !errors.Is(err, respserver.ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
			ts.errc <- err // for a test that looks again
		case <-time.After(waitFor):
			t.Errorf("Serve did not return after Close")
		}
	})
	return ts
}

// at sets the server's clock to d after storetest.Epoch.
func (ts *testServer) at(d time.Duration) { ts.clock.Set(storetest.Epoch + int64(d)) }

// client is a raw connection to a server: what it sends and receives are
// bytes, so tests see the exact wire format.
type client struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func (ts *testServer) dial(t testing.TB) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", ts.addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// send writes raw bytes.
func (c *client) send(s string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(waitFor))
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// read returns the next reply, whole and raw.
func (c *client) read() string {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	r, err := readReply(c.br)
	if err != nil {
		c.t.Fatalf("reading a reply: %v (read so far %q)", err, r)
	}
	return r
}

// do sends one command in multibulk form and returns its raw reply.
func (c *client) do(args ...string) string {
	c.t.Helper()
	c.send(multibulk(args...))
	return c.read()
}

// expectClosed checks that the server closes the connection, after sending
// nothing more than want.
func (c *client) expectClosed(want string) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	rest, err := io.ReadAll(c.br)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open after %v; read %q", waitFor, rest)
		}
		// A reset (the server closed with unread input) also closes.
	}
	if string(rest) != want {
		c.t.Fatalf("before closing the server sent %q, want %q", rest, want)
	}
}

// multibulk encodes a command as clients send it.
func multibulk(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// readReply reads one RESP2 or RESP3 reply from br and returns its bytes.
func readReply(br *bufio.Reader) (string, error) {
	var b strings.Builder
	err := readInto(&b, br)
	return b.String(), err
}

func readInto(b *strings.Builder, br *bufio.Reader) error {
	line, err := br.ReadString('\n')
	b.WriteString(line)
	if err != nil {
		return err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("bad reply line %q", line)
	}
	head := line[1 : len(line)-2]
	switch line[0] {
	case '+', '-', ':', ',', '#', '_', '(':
		return nil
	case '$', '=', '!':
		n, err := strconv.Atoi(head)
		if err != nil || n < 0 {
			return nil // a null bulk ($-1)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		b.Write(buf)
		return nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(head)
		if err != nil {
			return fmt.Errorf("bad aggregate length in %q", line)
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range max(n, 0) {
			if err := readInto(b, br); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown reply type in %q", line)
}

// The encodings of the replies that tests expect.

func simple(s string) string { return "+" + s + "\r\n" }
func errr(s string) string   { return "-" + s + "\r\n" }
func integer(n int64) string { return ":" + strconv.FormatInt(n, 10) + "\r\n" }
func bulk(s string) string   { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

const (
	nullBulk = "$-1\r\n"
	null3    = "_\r\n"
)

func array(elems ...string) string {
	return "*" + strconv.Itoa(len(elems)) + "\r\n" + strings.Join(elems, "")
}

// ints is CL.THROTTLE's reply of five integers.
func ints(v ...int64) string {
	out := make([]string, len(v))
	for i, n := range v {
		out[i] = integer(n)
	}
	return array(out...)
}

// field returns the value of name in an INFO reply ("" when absent).
func field(info, name string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return v
		}
	}
	return ""
}

// poll waits for cond, checking it every few milliseconds, at most waitFor.
func poll(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually.True(t, what, cond)
}

func TestServerConnectionCommands(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, simple("PONG")},
		{[]string{"ping", "hello"}, bulk("hello")},
		{[]string{"PING", "a", "b"}, errr("ERR wrong number of arguments for 'ping' command")},
		{[]string{"ECHO", "a\x00b\r\nc"}, bulk("a\x00b\r\nc")},
		{[]string{"echo"}, errr("ERR wrong number of arguments for 'echo' command")},
		{[]string{"ECHO", "a", "b"}, errr("ERR wrong number of arguments for 'echo' command")},
		{[]string{"SELECT", "0"}, simple("OK")},
		{[]string{"select", "1"}, errr("ERR DB index is out of range")},
		{[]string{"SELECT", "-1"}, errr("ERR DB index is out of range")},
		{[]string{"SELECT", "x"}, errr("ERR value is not an integer or out of range")},
		{[]string{"SELECT"}, errr("ERR wrong number of arguments for 'select' command")},
		{[]string{"AUTH", "x"}, errr("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")},
		// Without passwords, the default user accepts any password.
		{[]string{"AUTH", "default", "x"}, simple("OK")},
		{[]string{"AUTH", "nobody", "x"}, errr("WRONGPASS invalid username-password pair or user is disabled.")},
		{[]string{"AUTH", "a", "b", "c"}, errr("ERR syntax error")},
		{[]string{"AUTH"}, errr("ERR wrong number of arguments for 'auth' command")},
		{[]string{"CLIENT", "GETNAME"}, nullBulk},
		{[]string{"CLIENT", "SETNAME", "worker-1"}, simple("OK")},
		{[]string{"client", "getname"}, bulk("worker-1")},
		{[]string{"CLIENT", "SETNAME", "a b"}, errr("ERR Client names cannot contain spaces, newlines or special characters.")},
		{[]string{"CLIENT", "SETNAME"}, errr("ERR wrong number of arguments for 'client|setname' command")},
		{[]string{"CLIENT", "GETNAME", "x"}, errr("ERR wrong number of arguments for 'client|getname' command")},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis(,go1.24)"}, simple("OK")},
		{[]string{"CLIENT", "SETINFO", "lib-ver", "9.17.3"}, simple("OK")},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "a b"}, errr("ERR lib-name cannot contain spaces, newlines or special characters.")},
		{[]string{"CLIENT", "SETINFO", "color", "red"}, errr("ERR Unrecognized option 'color'")},
		{[]string{"CLIENT", "SETINFO", "lib-name"}, errr("ERR wrong number of arguments for 'client|setinfo' command")},
		{[]string{"CLIENT", "NO-EVICT", "on"}, simple("OK")},
		{[]string{"CLIENT", "NO-TOUCH", "maybe"}, errr("ERR syntax error")},
		{[]string{"CLIENT", "KILL", "x"}, errr("ERR unknown subcommand 'KILL'. Try CLIENT HELP.")},
		{[]string{"CLIENT"}, errr("ERR wrong number of arguments for 'client' command")},
		{[]string{"CONFIG", "GET", "maxclients"}, array(bulk("maxclients"), bulk("10000"))},
		{[]string{"CONFIG", "GET", "timeout", "databases"}, array(bulk("databases"), bulk("1"), bulk("timeout"), bulk("0"))},
		{[]string{"CONFIG", "GET", "max*", "maxclients"}, array(bulk("maxclients"), bulk("10000"))},
		{[]string{"CONFIG", "GET", "nosuch"}, array()},
		{[]string{"CONFIG", "GET"}, errr("ERR wrong number of arguments for 'config|get' command")},
		{[]string{"CONFIG", "SET", "maxclients", "1"}, errr("ERR CONFIG SET is not supported: Funnel is configured by its flags and configuration file")},
		{[]string{"CONFIG", "FOO"}, errr("ERR unknown subcommand 'FOO'. Try CONFIG HELP.")},
		{[]string{"COMMAND", "COUNT"}, integer(28)},
		{[]string{"COMMAND", "FOO"}, errr("ERR unknown subcommand 'FOO'. Try COMMAND HELP.")},
		{[]string{"COMMAND", "INFO", "nosuch"}, "*1\r\n*-1\r\n"},
		{[]string{"COMMAND", "DOCS", "nosuch"}, array()},
		{[]string{"RESET", "x"}, errr("ERR wrong number of arguments for 'reset' command")},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	if id := c.do("CLIENT", "ID"); !strings.HasPrefix(id, ":") || id == ":0\r\n" {
		t.Errorf("CLIENT ID = %q", id)
	}
	info := c.do("CLIENT", "INFO")
	for _, want := range []string{"name=worker-1 ", "db=0 ", "user=default ", "lib-name=go-redis(,go1.24) ", "lib-ver=9.17.3 ", "resp=2"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLIENT INFO = %q, want it to contain %q", info, want)
		}
	}
	if !strings.HasPrefix(info, "$") || !strings.HasSuffix(info, "\n\r\n") {
		t.Errorf("CLIENT INFO in RESP2 = %q, want one bulk string ending in a newline", info)
	}
}

// TestServerUnknownCommand checks the text of Redis 7 for unknown commands:
// the name and at most 128 bytes of arguments, each quoted ("%.128s" and
// "'%.*s' " while the arguments so far are under 128 bytes).
func TestServerUnknownCommand(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	a200 := strings.Repeat("a", 200)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"foo"}, "ERR unknown command 'foo', with args beginning with: "},
		{[]string{"FOO", "bar", "baz"}, "ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' "},
		{[]string{"foo", "a b", "c\"d"}, "ERR unknown command 'foo', with args beginning with: 'a b' 'c\"d' "},
		// An argument is cut to what is left of the 128 bytes; a
		// second argument starts only while they are under 128.
		{[]string{"foo", a200, a200}, "ERR unknown command 'foo', with args beginning with: '" + a200[:128] + "' "},
		{[]string{"foo", "x", a200, a200}, "ERR unknown command 'foo', with args beginning with: 'x' '" + a200[:124] + "' "},
		{[]string{a200, "x"}, "ERR unknown command '" + a200[:128] + "', with args beginning with: 'x' "},
		// As in C, a NUL byte ends the name and each argument.
		{[]string{"fo\x00o", "x", "a\x00bcd", "y"}, "ERR unknown command 'fo', with args beginning with: 'x' 'a' 'y' "},
		// CR and LF become spaces, so the error stays on its line.
		{[]string{"foo\r\nbar", "x\ny"}, "ERR unknown command 'foo  bar', with args beginning with: 'x y' "},
		// The name of an existing command is not enough with a prefix.
		{[]string{"cl.throttlex", "k"}, "ERR unknown command 'cl.throttlex', with args beginning with: 'k' "},
		{[]string{"GET", "k"}, "ERR unknown command 'GET', with args beginning with: 'k' "},
		{[]string{"SET", "k", "v"}, "ERR unknown command 'SET', with args beginning with: 'k' 'v' "},
	} {
		if got, want := c.do(tc.args...), errr(tc.want); got != want {
			t.Errorf("%.40q:\n got %q\nwant %q", tc.args, got, want)
		}
	}
	// The connection stays usable.
	if got := c.do("PING"); got != simple("PONG") {
		t.Fatalf("PING after unknown commands: %q", got)
	}
}

const (
	noauth      = "NOAUTH Authentication required."
	wrongpass   = "WRONGPASS invalid username-password pair or user is disabled."
	helloNoauth = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
)

func TestServerAuth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{Password: "sekret", Users: map[string]string{"alice": "wonder"}})
	c := ts.dial(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Before authentication: only AUTH, HELLO, QUIT and RESET run;
		// unknown commands and wrong arities are reported first, as in
		// Redis.
		{[]string{"PING"}, errr(noauth)},
		{[]string{"CL.THROTTLE", "k", "1", "1", "1"}, errr(noauth)},
		{[]string{"CLIENT", "SETNAME", "x"}, errr(noauth)},
		{[]string{"ECHO"}, errr("ERR wrong number of arguments for 'echo' command")},
		{[]string{"GET", "k"}, errr("ERR unknown command 'GET', with args beginning with: 'k' ")},
		{[]string{"HELLO", "3"}, errr(helloNoauth)},
		{[]string{"HELLO"}, errr(helloNoauth)},
		{[]string{"HELLO", "3", "AUTH", "default", "wrong"}, errr(wrongpass)},
		{[]string{"AUTH", "wrong"}, errr(wrongpass)},
		{[]string{"AUTH", "alice", "sekret"}, errr(wrongpass)},
		{[]string{"AUTH", "nobody", "sekret"}, errr(wrongpass)},
		{[]string{"PING"}, errr(noauth)},
		{[]string{"RESET"}, simple("RESET")},
		{[]string{"AUTH", "sekret"}, simple("OK")},
		{[]string{"PING"}, simple("PONG")},
		// RESET forgets the authentication.
		{[]string{"RESET"}, simple("RESET")},
		{[]string{"PING"}, errr(noauth)},
		{[]string{"AUTH", "default", "sekret"}, simple("OK")},
		{[]string{"PING"}, simple("PONG")},
		{[]string{"RESET"}, simple("RESET")},
		{[]string{"AUTH", "alice", "wonder"}, simple("OK")},
		{[]string{"CL.THROTTLE", "k", "1", "1", "1"}, ints(0, 2, 1, -1, 1)},
		// A failed AUTH does not log the client out.
		{[]string{"AUTH", "alice", "wrong"}, errr(wrongpass)},
		{[]string{"PING"}, simple("PONG")},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	if info := c.do("CLIENT", "INFO"); !strings.Contains(info, " user=alice ") {
		t.Errorf("CLIENT INFO after AUTH alice: %q", info)
	}

	// HELLO with AUTH and SETNAME authenticates, names and switches the
	// protocol at once.
	c2 := ts.dial(t)
	got := c2.do("HELLO", "3", "AUTH", "alice", "wonder", "SETNAME", "w1")
	if !strings.HasPrefix(got, "%7\r\n$6\r\nserver\r\n$6\r\nfunnel\r\n") || !strings.Contains(got, "$5\r\nproto\r\n:3\r\n") {
		t.Fatalf("HELLO 3 AUTH ... SETNAME: %q", got)
	}
	if got := c2.do("CLIENT", "GETNAME"); got != bulk("w1") {
		t.Errorf("name after HELLO SETNAME: %q", got)
	}
	if got := c2.do("CLIENT", "INFO"); !strings.HasPrefix(got, "=") || !strings.Contains(got, " user=alice ") || !strings.Contains(got, " resp=3") {
		t.Errorf("CLIENT INFO in RESP3: %q", got)
	}
	// A HELLO that fails changes nothing.
	if got := c2.do("HELLO", "2", "AUTH", "alice", "wrong"); got != errr(wrongpass) {
		t.Errorf("HELLO with a wrong password: %q", got)
	}
	if got := c2.do("CLIENT", "GETNAME"); got != bulk("w1") {
		t.Errorf("RESP3 kept after a failed HELLO: %q", got)
	}

	// A users file alone (no requirepass) requires authentication too.
	us := startServer(t, respserver.Config{Users: map[string]string{"bob": "builder"}})
	c3 := us.dial(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, errr(noauth)},
		{[]string{"AUTH", "builder"}, errr(wrongpass)},
		{[]string{"AUTH", "bob", "builder"}, simple("OK")},
		{[]string{"PING"}, simple("PONG")},
	} {
		if got := c3.do(tc.args...); got != tc.want {
			t.Errorf("users only: %q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}

	// QUIT works before authentication.
	c4 := ts.dial(t)
	c4.send(multibulk("QUIT"))
	c4.expectClosed(simple("OK"))
}

func TestServerHello(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"HELLO", "4"}, errr("NOPROTO unsupported protocol version")},
		{[]string{"HELLO", "1"}, errr("NOPROTO unsupported protocol version")},
		{[]string{"HELLO", "x"}, errr("ERR Protocol version is not an integer or out of range")},
		{[]string{"HELLO", "3", "FOO"}, errr("ERR Syntax error in HELLO option 'FOO'")},
		{[]string{"HELLO", "3", "AUTH", "u"}, errr("ERR Syntax error in HELLO option 'AUTH'")},
		{[]string{"HELLO", "3", "SETNAME"}, errr("ERR Syntax error in HELLO option 'SETNAME'")},
		{[]string{"HELLO", "3", "SETNAME", "a b"}, errr("ERR Client names cannot contain spaces, newlines or special characters.")},
		// Still RESP2: a failed HELLO changes nothing.
		{[]string{"CLIENT", "GETNAME"}, nullBulk},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	id := strings.TrimSuffix(strings.TrimPrefix(c.do("CLIENT", "ID"), ":"), "\r\n")
	hello := func(proto, version string) string {
		head := "%7\r\n"
		if proto == "2" {
			head = "*14\r\n"
		}
		return head + bulk("server") + bulk("funnel") + bulk("version") + bulk(version) +
			bulk("proto") + integer(int64(proto[0]-'0')) + bulk("id") + ":" + id + "\r\n" +
			bulk("mode") + bulk("standalone") + bulk("role") + bulk("master") + bulk("modules") + "*0\r\n"
	}
	check := func(args []string, proto string) {
		t.Helper()
		got := c.do(args...)
		// The version is the build's; the rest is exact.
		i := strings.Index(got, "$7\r\nversion\r\n$")
		if i < 0 {
			t.Fatalf("%q: no version in %q", args, got)
		}
		var vlen int
		rest := got[i+len("$7\r\nversion\r\n"):]
		if _, err := fmt.Sscanf(rest, "$%d\r\n", &vlen); err != nil {
			t.Fatalf("%q: %q", args, got)
		}
		version := rest[strings.Index(rest, "\n")+1:][:vlen]
		if version == "" || strings.HasPrefix(version, "v") {
			t.Errorf("HELLO's version %q: want the version without its v", version)
		}
		if want := hello(proto, version); got != want {
			t.Errorf("%q:\n got %q\nwant %q", args, got, want)
		}
	}
	check([]string{"HELLO"}, "2")
	check([]string{"HELLO", "3", "SETNAME", "n3"}, "3")
	// RESP3 encodings: null, verbatim strings, maps, sets.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "GETNAME"}, bulk("n3")},
		{[]string{"CONFIG", "GET", "databases"}, "%1\r\n" + bulk("databases") + bulk("1")},
		{[]string{"COMMAND", "INFO", "nosuch"}, "*1\r\n_\r\n"},
		{[]string{"PING"}, simple("PONG")},
		{[]string{"CL.THROTTLE", "k", "15", "30", "60"}, ints(0, 16, 15, -1, 2)},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("RESP3 %q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
	if got := c.do("HELLO", "3", "SETNAME", "x y"); got != errr("ERR Client names cannot contain spaces, newlines or special characters.") {
		t.Errorf("HELLO 3 SETNAME 'x y': %q", got)
	}
	if got := c.do("INFO", "server"); !strings.HasPrefix(got, "=") || !strings.Contains(got, "txt:# Server\r\n") {
		t.Errorf("INFO in RESP3: %.80q", got)
	}
	// RESET goes back to RESP2 and forgets the name.
	if got := c.do("RESET"); got != simple("RESET") {
		t.Fatalf("RESET: %q", got)
	}
	if got := c.do("CLIENT", "GETNAME"); got != nullBulk {
		t.Errorf("name after RESET: %q", got)
	}
	check([]string{"HELLO", "2"}, "2")
	if got := c.do("CLIENT", "GETNAME"); got != nullBulk {
		t.Errorf("GETNAME after HELLO 2: %q", got)
	}
	c.send(multibulk("HELLO", "3"))
	c.read()
	if got := c.do("CLIENT", "GETNAME"); got != null3 {
		t.Errorf("GETNAME without a name in RESP3: %q", got)
	}
}

// INFO counts the keys that a store bounded in keys evicted.
func TestServerInfoEvictions(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewClock(storetest.Epoch)
	st := memstore.New(memstore.Options{Now: clock.Now, MaxKeys: 1})
	t.Cleanup(func() { st.Close() })
	ts := serveStore(t, ln, respserver.Config{EventLoops: testEventLoops}, st, clock)
	c := ts.dial(t)
	for _, key := range []string{"a", "b", "c"} {
		c.do("CL.THROTTLE", key, "0", "1", "60")
	}
	if got := field(c.do("INFO", "stats"), "evicted_keys"); got != "2" {
		t.Fatalf("evicted_keys = %q, want 2", got)
	}
}

func TestServerInfo(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{MaxClients: 50})
	c := ts.dial(t)
	c.do("CL.THROTTLE", "a", "0", "1", "60")
	c.do("CL.THROTTLE", "a", "0", "1", "60")
	c.do("CL.THROTTLE", "b", "0", "1", "60")
	other := ts.dial(t)
	other.do("PING")
	info := c.do("INFO")
	if !strings.HasPrefix(info, "$") {
		t.Fatalf("INFO in RESP2 is not a bulk string: %.40q", info)
	}
	for _, want := range []string{"# Server\r\n", "\r\n\r\n# Clients\r\n", "\r\n\r\n# Stats\r\n", "\r\n\r\n# Keyspace\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q:\n%s", want, info)
		}
	}
	_, port, _ := net.SplitHostPort(ts.addr)
	for name, want := range map[string]string{
		"redis_version":              "7.0.0",
		"redis_mode":                 "standalone",
		"tcp_port":                   port,
		"connected_clients":          "2",
		"maxclients":                 "50",
		"total_connections_received": "2",
		"rejected_connections":       "0",
		"throttle_allowed":           "2",
		"throttle_limited":           "1",
		"evicted_keys":               "0",
		"db0":                        "keys=2,expires=2,avg_ttl=0",
	} {
		if got := field(info, name); got != want {
			t.Errorf("INFO %s = %q, want %q", name, got, want)
		}
	}
	// total_commands_processed counts this INFO too.
	if got := field(info, "total_commands_processed"); got != "5" {
		t.Errorf("total_commands_processed = %q, want 5", got)
	}
	// Sections by name, in any case; unknown sections are empty.
	stats := c.do("INFO", "STATS")
	if strings.Contains(stats, "# Server") || !strings.Contains(stats, "# Stats\r\n") {
		t.Errorf("INFO STATS: %q", stats)
	}
	two := c.do("info", "server", "keyspace")
	if !strings.Contains(two, "# Server\r\n") || !strings.Contains(two, "# Keyspace\r\n") || strings.Contains(two, "# Clients") {
		t.Errorf("INFO server keyspace: %q", two)
	}
	if got := c.do("INFO", "nosuch"); got != bulk("") {
		t.Errorf("INFO nosuch = %q", got)
	}
	// CLIENT LIST shows both connections, by id.
	list := c.do("CLIENT", "LIST")
	if n := strings.Count(list, "id="); n != 2 || strings.Count(list, "\n") != 4 {
		t.Errorf("CLIENT LIST: %q", list)
	}
}

// DBSIZE counts the memory store's keys, as INFO's keyspace does.
func TestServerDBSize(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	if got := c.do("DBSIZE"); got != integer(0) {
		t.Errorf("DBSIZE of an empty store = %q", got)
	}
	c.do("CL.THROTTLE", "a", "10", "10", "60")
	c.do("CL.THROTTLE", "b", "10", "10", "60")
	if got := c.do("DBSIZE"); got != integer(2) {
		t.Errorf("DBSIZE = %q, want 2", got)
	}
	if got := c.do("DBSIZE", "x"); !strings.HasPrefix(got, "-ERR wrong number of arguments") {
		t.Errorf("DBSIZE x = %q", got)
	}
}

func TestServerCommand(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	names := []string{"auth", "cl.throttle", "client", "command", "config", "dbsize", "del", "echo", "exists",
		"funnel.acquire", "funnel.allow", "funnel.allowall", "funnel.bans", "funnel.charge", "funnel.refund", "funnel.release", "funnel.reserve",
		"funnel.settle", "funnel.unban",
		"gcra", "hello", "info", "ping", "pttl", "quit", "reset", "select", "ttl"}
	var list []string
	for _, n := range names {
		list = append(list, bulk(n))
	}
	if got := c.do("COMMAND", "LIST"); got != array(list...) {
		t.Errorf("COMMAND LIST = %q", got)
	}
	if got := c.do("COMMAND", "COUNT"); got != integer(int64(len(names))) {
		t.Errorf("COMMAND COUNT = %q", got)
	}
	// COMMAND INFO in Redis 7's shape: cl.throttle as redis-cell registers
	// it (arity -1, write, module, key at 1), with one key spec.
	want := array(
		bulk("cl.throttle"), integer(-1), array(simple("write"), simple("module")), integer(1), integer(1), integer(1),
		array(), array(),
		array("*8\r\n"+bulk("flags")+array(simple("RW"))+bulk("begin_search")+
			"*4\r\n"+bulk("type")+bulk("index")+bulk("spec")+"*2\r\n"+bulk("index")+integer(1)+
			bulk("find_keys")+"*4\r\n"+bulk("type")+bulk("range")+bulk("spec")+
			"*6\r\n"+bulk("lastkey")+integer(0)+bulk("keystep")+integer(1)+bulk("limit")+integer(0)+
			bulk("notes")+bulk("")),
		array())
	if got := c.do("COMMAND", "INFO", "CL.THROTTLE"); got != array(want) {
		t.Errorf("COMMAND INFO CL.THROTTLE:\n got %q\nwant %q", got, array(want))
	}
	// Every command has an entry in COMMAND and COMMAND INFO.
	all := c.do("COMMAND")
	if !strings.HasPrefix(all, "*28\r\n") {
		t.Errorf("COMMAND: %.40q", all)
	}
	if got := c.do("COMMAND", "INFO"); got != all {
		t.Errorf("COMMAND INFO without names differs from COMMAND")
	}
	// COMMAND DOCS: summary, since, group, complexity and arguments,
	// nested for HELLO's AUTH block.
	docs := c.do("COMMAND", "DOCS", "hello", "nosuch", "PING")
	for _, want := range []string{
		"*4\r\n" + bulk("hello"), bulk("summary"), bulk("group") + bulk("connection"),
		bulk("name") + bulk("auth") + bulk("type") + bulk("block") + bulk("token") + bulk("AUTH"),
		bulk("arguments") + "*2\r\n" + "*4\r\n" + bulk("name") + bulk("username"),
		bulk("ping"),
	} {
		if !strings.Contains(docs, want) {
			t.Errorf("COMMAND DOCS lacks %q:\n%q", want, docs)
		}
	}
	if all := c.do("COMMAND", "DOCS"); !strings.HasPrefix(all, "*56\r\n") {
		t.Errorf("COMMAND DOCS: %.40q", all)
	}
}

func TestServerClientTracking(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{})
	c := ts.dial(t)
	const refused = "ERR client-side caching is not supported: only CLIENT TRACKING ON OPTIN is accepted, and no key is ever opted in"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN"}, simple("OK")},
		{[]string{"CLIENT", "TRACKING", "on", "noloop", "optin"}, simple("OK")},
		{[]string{"CLIENT", "TRACKING", "OFF"}, simple("OK")},
		{[]string{"CLIENT", "TRACKING", "ON"}, errr(refused)},
		{[]string{"CLIENT", "TRACKING", "ON", "BCAST"}, errr(refused)},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN", "REDIRECT", "7"}, errr(refused)},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTOUT"}, errr(refused)},
		{[]string{"CLIENT", "TRACKING", "MAYBE"}, errr("ERR syntax error")},
		{[]string{"CLIENT", "TRACKING"}, errr("ERR wrong number of arguments for 'client|tracking' command")},
		{[]string{"CLIENT", "CACHING", "YES"}, errr("ERR client-side caching is not supported: CLIENT CACHING is refused")},
		{[]string{"CLIENT", "CACHING"}, errr("ERR wrong number of arguments for 'client|caching' command")},
	} {
		if got := c.do(tc.args...); got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
}
