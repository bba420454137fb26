package respserver_test

import (
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/testlog"
	"github.com/funnelrl/funnel/respserver"
)

// creds is a Credentials of one user, which counts its checks.
type creds struct {
	mu     sync.Mutex
	checks int
}

func (c *creds) Enabled() bool        { return true }
func (c *creds) Has(user string) bool { return user == "carol" }
func (c *creds) Check(user, password string) bool {
	c.mu.Lock()
	c.checks++
	c.mu.Unlock()
	return user == "carol" && password == "c-pass"
}

// Config.Credentials replaces Password and Users.
func TestCredentials(t *testing.T) {
	t.Parallel()
	cr := &creds{}
	ts := startServer(t, respserver.Config{Password: "ignored", Users: map[string]string{"alice": "a"}, Credentials: cr})
	c := ts.dial(t)
	for _, tc := range []struct{ args []string }{{[]string{"AUTH", "ignored"}}, {[]string{"AUTH", "alice", "a"}}, {[]string{"HELLO", "3", "AUTH", "carol", "wrong"}}} {
		if got := c.do(tc.args...); got != "-"+wrongpass+"\r\n" {
			t.Fatalf("%q: %q", tc.args, got)
		}
	}
	if got := c.do("CL.THROTTLE", "k", "1", "1", "60"); !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("CL.THROTTLE before AUTH: %q", got)
	}
	if got := c.do("AUTH", "carol", "c-pass"); got != "+OK\r\n" {
		t.Fatalf("AUTH carol: %q", got)
	}
	if got := c.do("CLIENT", "INFO"); !strings.Contains(got, " user=carol ") {
		t.Fatalf("CLIENT INFO: %q", got)
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.checks != 4 {
		t.Fatalf("%d checks, want 4", cr.checks)
	}
}

// A failed AUTH logs the user name only when it names a user: a password
// typed in its place never reaches the log.
func TestAuthLogsNoPassword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		logged  string
		secrets []string
	}{
		{[]string{"AUTH", "wonder", "x"}, `user=""`, []string{"wonder"}},
		{[]string{"AUTH", "alice", "sekret"}, "user=alice", []string{"sekret"}},
		{[]string{"HELLO", "2", "AUTH", "sekret", "wonder"}, `user=""`, []string{"sekret", "wonder"}},
	} {
		log, logs := testlog.New(slog.LevelInfo)
		ts := startServer(t, respserver.Config{
			Password: "sekret",
			Users:    map[string]string{"alice": "wonder"},
			Logger:   log,
		})
		if got := ts.dial(t).do(tc.args...); got != "-"+wrongpass+"\r\n" {
			t.Fatalf("%q: %q", tc.args, got)
		}
		out := logs.String()
		if !strings.Contains(out, "authentication failed") || !strings.Contains(out, tc.logged) {
			t.Errorf("%q: the log lacks %s:\n%s", tc.args, tc.logged, out)
		}
		for _, s := range tc.secrets {
			if strings.Contains(out, s) {
				t.Errorf("%q: the log shows %q:\n%s", tc.args, s, out)
			}
		}
	}
}

// TestAuthTimeout fills MaxClients with clients that never authenticate,
// one silent, one that keeps sending commands and one that authenticates
// and then RESETs: each is closed AuthTimeout after it connected (or lost
// its credentials), busy or not; a client that authenticated stays
// connected, past the timeout, until it leaves.
func TestAuthTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	ts := startServer(t, respserver.Config{Password: "pw", AuthTimeout: timeout, MaxClients: 4})
	authed := ts.dial(t)
	if got := authed.do("AUTH", "pw"); got != simple("OK") {
		t.Fatalf("AUTH: %q", got)
	}
	silent, busy, reset := ts.dial(t), ts.dial(t), ts.dial(t)
	if got := reset.do("AUTH", "pw"); got != simple("OK") {
		t.Fatalf("AUTH: %q", got)
	}
	if got := reset.do("RESET"); got != simple("RESET") {
		t.Fatalf("RESET: %q", got)
	}
	stop := make(chan struct{})
	busyDone := make(chan error, 1)
	go func() {
		// Commands every 20 ms, as a client that guesses passwords:
		// they do not keep it connected.
		for {
			select {
			case <-stop:
				busyDone <- nil
				return
			case <-time.After(20 * time.Millisecond):
			}
			busy.nc.SetDeadline(time.Now().Add(waitFor))
			if _, err := io.WriteString(busy.nc, multibulk("AUTH", "guess")); err != nil {
				busyDone <- nil // closed
				return
			}
			if _, err := readReply(busy.br); err != nil {
				busyDone <- nil // closed
				return
			}
		}
	}()
	silent.expectClosed("")
	reset.expectClosed("")
	select {
	case <-busyDone:
	case <-time.After(waitFor):
		close(stop)
		<-busyDone
		t.Fatalf("a client that sends commands without authenticating is still connected after %v", waitFor)
	}
	poll(t, "the unauthenticated clients to be gone", func() bool { return ts.srv.Stats().Clients == 1 })
	if got := authed.do("PING"); got != simple("PONG") {
		t.Fatalf("the authenticated client after the timeout: %q", got)
	}
}

// TestMaxClientsEvictsUnauthenticated fills MaxClients: a new client takes
// the place of the one that has gone longest without authenticating, which
// is closed; once every client has authenticated, a new one is refused.
func TestMaxClientsEvictsUnauthenticated(t *testing.T) {
	t.Parallel()
	ts := startServer(t, respserver.Config{Password: "pw", MaxClients: 3, AuthTimeout: -1})
	authed := ts.dial(t)
	if got := authed.do("AUTH", "pw"); got != simple("OK") {
		t.Fatalf("AUTH: %q", got)
	}
	older, newer := ts.dial(t), ts.dial(t)
	older.do("PING") // not allowed: -NOAUTH; connected all the same
	newer.do("PING")
	poll(t, "three clients", func() bool { return ts.srv.Stats().Clients == 3 })
	late := ts.dial(t)
	if got := late.do("AUTH", "pw"); got != simple("OK") {
		t.Fatalf("AUTH of a client over MaxClients: %q", got)
	}
	older.expectClosed("")
	if got := newer.do("AUTH", "pw"); got != simple("OK") {
		t.Fatalf("AUTH of the newer client: %q", got)
	}
	poll(t, "the older client to be gone", func() bool { return ts.srv.Stats().Clients == 3 })
	ts.dial(t).expectClosed("-ERR max number of clients reached\r\n")
	if got := ts.srv.Stats(); got.Evicted != 1 || got.Rejected != 1 {
		t.Fatalf("Stats = %+v, want 1 evicted, 1 rejected", got)
	}
	if got := field(authed.do("INFO"), "evicted_clients"); got != "1" {
		t.Fatalf("evicted_clients = %q", got)
	}
}
