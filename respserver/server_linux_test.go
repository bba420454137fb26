package respserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/testlog"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/respserver"
)

// These tests use Linux's socket buffer sizes and /proc. Those that leave
// Config.EventLoops zero run in both of the suite's modes; those about the
// event loops alone set it.

// smallBufListener returns a listener whose connections have a send buffer
// of about size bytes, so that a client that does not read fills it soon.
func smallBufListener(t testing.TB, size int) net.Listener {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, size)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// stable waits until f returns the same value for 200 ms, and returns it.
func stable(t testing.TB, f func() int64) int64 {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	last, same := f(), 0
	for same < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("still changing after %v", waitFor)
		}
		time.Sleep(50 * time.Millisecond)
		if v := f(); v == last {
			same++
		} else {
			last, same = v, 0
		}
	}
	return last
}

// TestServerBackPressure has a client pipeline commands with large replies
// and read none: the server stops running its commands once the socket is
// full (an event loop keeps at most about a batch of replies waiting), then
// answers every one of them, in order, as the client reads.
func TestServerBackPressure(t *testing.T) {
	t.Parallel()
	ts := startServerOn(t, smallBufListener(t, 8<<10), respserver.Config{})
	c := ts.dial(t)
	want := c.do("COMMAND")
	const n = 1000
	before := ts.srv.Stats().Commands
	c.send(strings.Repeat("COMMAND\r\n", n))
	ran := stable(t, func() int64 { return ts.srv.Stats().Commands }) - before
	t.Logf("%d commands of %d bytes of reply ran while the client read nothing", ran, len(want))
	if ran >= n {
		t.Fatalf("the server ran all %d commands of a client that reads none of the replies", n)
	}
	// With a goroutine per connection, the counts of a batch show only at
	// its end; an event loop counts what it ran before it stopped.
	if testEventLoops >= 0 && int(ran)*len(want) > 1<<20 {
		t.Fatalf("the server ran %d commands, %d bytes of replies, for a client that reads none", ran, int(ran)*len(want))
	}
	for i := range n {
		if got := c.read(); got != want {
			t.Fatalf("reply %d: %d bytes, want the %d of COMMAND", i, len(got), len(want))
		}
	}
	if got := c.do("PING"); got != simple("PONG") {
		t.Fatalf("PING after the pipeline: %q", got)
	}
	if got := ts.srv.Stats().Commands - before; got != n+1 {
		t.Fatalf("%d commands counted, want %d", got, n+1)
	}
}

// TestEventLoopOutputLimit: a client whose waiting replies exceed
// MaxOutputBuffer is disconnected, and the server says why in its log.
func TestEventLoopOutputLimit(t *testing.T) {
	if testEventLoops < 0 {
		t.Skip("event loops only: runs in the suite's event-loop pass")
	}
	t.Parallel()
	log, logs := testlog.New(slog.LevelInfo)
	ts := startServerOn(t, smallBufListener(t, 8<<10), respserver.Config{
		EventLoops: 1, MaxOutputBuffer: 64 << 10,
		Logger: log,
	})
	bystander := ts.dial(t)
	bystander.do("PING")
	c := ts.dial(t)
	// One reply of 480 KiB, which the client does not read yet: the
	// sockets take a few hundred KiB at most, what waits is over the limit.
	big := strings.Repeat("x", 480<<10)
	go func() {
		c.nc.SetWriteDeadline(time.Now().Add(waitFor))
		c.nc.Write([]byte(multibulk("ECHO", big) + multibulk("PING")))
	}()
	poll(t, "the client to be closed", func() bool { return ts.srv.Stats().Clients == 1 })
	c.nc.SetReadDeadline(time.Now().Add(waitFor))
	got, err := io.ReadAll(c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the client is still connected after %v", waitFor)
	}
	if len(got) >= len(bulk(big)) {
		t.Fatalf("the client got %d bytes, the whole reply", len(got))
	}
	if !strings.Contains(logs.String(), "output buffer limit") {
		t.Errorf("log:\n%s", logs.String())
	}
	if got := bystander.do("PING"); got != simple("PONG") {
		t.Fatalf("bystander: %q", got)
	}
}

// TestEventLoopIdleClientNotReading: with IdleTimeout, a client that sends
// nothing and takes none of its replies for that long is closed, as Redis
// does (a goroutine per connection would wait on its write).
func TestEventLoopIdleClientNotReading(t *testing.T) {
	if testEventLoops < 0 {
		t.Skip("event loops only: runs in the suite's event-loop pass")
	}
	t.Parallel()
	const idle = 300 * time.Millisecond
	ts := startServerOn(t, smallBufListener(t, 8<<10), respserver.Config{EventLoops: 1, IdleTimeout: idle})
	c := ts.dial(t)
	c.do("PING")
	start := time.Now()
	c.send(strings.Repeat("COMMAND\r\n", 400))
	poll(t, "the client to be closed", func() bool { return ts.srv.Stats().Clients == 0 })
	if waited := time.Since(start); waited < idle/2 {
		t.Fatalf("closed after %v, before the timeout of %v", waited, idle)
	}
}

// TestEventLoopsManyClients spreads clients over four loops: each is
// served, CLIENT LIST and INFO see all of them from any loop, the counts
// add up, and the goroutines do not grow with the clients.
func TestEventLoopsManyClients(t *testing.T) {
	if testEventLoops < 0 {
		t.Skip("event loops only: runs in the suite's event-loop pass")
	}
	// Not parallel: it counts goroutines.
	ts := startServer(t, respserver.Config{EventLoops: 4})
	first := ts.dial(t)
	first.do("PING")
	goroutines := runtime.NumGoroutine()
	const n, per = 200, 50
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = ts.dial(t)
		if got := clients[i].do("CLIENT", "SETNAME", "c"+strconv.Itoa(i)); got != simple("OK") {
			t.Fatalf("client %d: %q", i, got)
		}
	}
	if more := runtime.NumGoroutine() - goroutines; more > 5 {
		t.Errorf("%d clients took %d more goroutines", n, more)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "many:" + strconv.Itoa(i%7)
			c.nc.SetWriteDeadline(time.Now().Add(waitFor))
			if _, err := io.WriteString(c.nc, strings.Repeat(multibulk("CL.THROTTLE", key, "100000", "1", "1"), per)); err != nil {
				errs <- err
				return
			}
			c.nc.SetReadDeadline(time.Now().Add(waitFor))
			for j := range per {
				if r, err := readReply(c.br); err != nil || !strings.HasPrefix(r, "*5\r\n:0\r\n") {
					errs <- fmt.Errorf("client %d, reply %d: %q, %v", i, j, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list := first.do("CLIENT", "LIST")
	for i := range n {
		if !strings.Contains(list, " name=c"+strconv.Itoa(i)+" ") {
			t.Fatalf("CLIENT LIST lacks client %d:\n%s", i, list)
		}
	}
	if got := strings.Count(list, "id="); got != n+1 {
		t.Fatalf("CLIENT LIST has %d clients, want %d", got, n+1)
	}
	if got := field(first.do("INFO", "clients"), "connected_clients"); got != strconv.Itoa(n+1) {
		t.Fatalf("connected_clients = %s", got)
	}
	if st := ts.srv.Stats(); st.Allowed != n*per || st.Limited != 0 || st.Clients != n+1 {
		t.Fatalf("Stats = %+v, want %d allowed", st, n*per)
	}
}

// TestServerShutdownPendingOutput: Shutdown waits for the replies of a
// client that reads slowly, answers every command it had read, and closes
// the connection once they are out.
func TestServerShutdownPendingOutput(t *testing.T) {
	t.Parallel()
	ts := startServerOn(t, smallBufListener(t, 8<<10), respserver.Config{})
	c := ts.dial(t)
	want := c.do("COMMAND")
	// 400 commands in one segment, which the server reads at once; their
	// replies, nearly 1 MiB, do not fit in the sockets.
	const n = 400
	c.send(strings.Repeat("COMMAND\r\n", n))
	done := make(chan error, 1)
	go func() { done <- ts.srv.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while replies wait for the client", err)
	case <-time.After(300 * time.Millisecond): // time enough to close the connection if it did not wait
	}
	for i := range n {
		if got := c.read(); got != want {
			t.Fatalf("reply %d: %d bytes, want the %d of COMMAND", i, len(got), len(want))
		}
	}
	c.expectClosed("")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(waitFor):
		t.Fatal("Shutdown did not return")
	}
	if st := ts.srv.Stats(); st.Clients != 0 {
		t.Fatalf("Stats after Shutdown: %+v", st)
	}
}

// openFDs returns the number of the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// TestServerNoDescriptorLeak serves clients of every kind (some that quit,
// break the protocol, leave mid-command, reset mid-pipeline, are refused
// over MaxClients), stops the server with Close or Shutdown, and checks
// that the descriptors and goroutines are back to what they were. It does
// not run in parallel, so that other tests' descriptors do not count.
func TestServerNoDescriptorLeak(t *testing.T) {
	for _, stop := range []string{"Close", "Shutdown"} {
		t.Run(stop, func(t *testing.T) {
			// The runtime's own descriptors (its epoll) exist from the
			// first connection on.
			warm, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			warm.Close()
			fds, goroutines := openFDs(t), runtime.NumGoroutine()
			func() {
				ts := startServer(t, respserver.Config{MaxClients: 20})
				var conns []net.Conn
				dial := func() *client {
					c := ts.dial(t)
					conns = append(conns, c.nc)
					return c
				}
				for range 10 {
					c := dial()
					c.do("CL.THROTTLE", "leak", "100", "1", "1")
				}
				q := dial()
				q.send("PING\r\nQUIT\r\nPING\r\n")
				q.expectClosed(simple("PONG") + simple("OK"))
				p := dial()
				p.send("*1\r\n$-1\r\n")
				p.expectClosed("-ERR Protocol error: invalid bulk length\r\n")
				half := dial()
				half.send("*3\r\n$4\r\nECHO\r\n")
				r := dial()
				r.nc.(*net.TCPConn).SetLinger(0)
				r.send(strings.Repeat(multibulk("COMMAND"), 300))
				r.nc.Close()
				poll(t, "the quitters to be gone", func() bool { return ts.srv.Stats().Clients == 11 })
				for range 9 {
					dial().do("PING")
				}
				over := dial()
				over.expectClosed("-ERR max number of clients reached\r\n")
				if stop == "Close" {
					ts.srv.Close()
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), waitFor)
					defer cancel()
					if err := ts.srv.Shutdown(ctx); err != nil {
						t.Fatalf("Shutdown: %v", err)
					}
				}
				if err := <-ts.errc; err != respserver.ErrServerClosed {
					t.Fatalf("Serve returned %v", err)
				}
				ts.errc <- respserver.ErrServerClosed
				ts.store.Close()
				for _, nc := range conns {
					nc.Close()
				}
			}()
			deadline := time.Now().Add(waitFor)
			for (openFDs(t) > fds || runtime.NumGoroutine() > goroutines) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if now := openFDs(t); now > fds {
				t.Errorf("%d descriptors before, %d after %s", fds, now, stop)
			}
			if now := runtime.NumGoroutine(); now > goroutines {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines before, %d after %s:\n%s", goroutines, now, stop, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// nonBlockingStore is a store that says that it never waits.
type nonBlockingStore struct{ funnel.Store }

func (nonBlockingStore) NonBlocking() bool { return true }

// opaqueStore is a store that says nothing more than funnel.Store.
type opaqueStore struct{ funnel.Store }

// TestServerEventLoopsAuto: with EventLoops zero, a store that says it does
// not block is served by event loops (the goroutines do not grow with the
// clients), and any other store by a goroutine per connection.
func TestServerEventLoopsAuto(t *testing.T) {
	// Not parallel: it counts goroutines.
	for _, tc := range []struct {
		name  string
		wrap  func(funnel.Store) funnel.Store
		loops bool
	}{
		{"NonBlocking", func(s funnel.Store) funnel.Store { return nonBlockingStore{s} }, true},
		{"Other", func(s funnel.Store) funnel.Store { return opaqueStore{s} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New(memstore.Options{})
			defer st.Close()
			srv := respserver.New(tc.wrap(st), respserver.Config{Logger: quietLogger()})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			defer func() {
				srv.Close()
				<-errc
			}()
			ts := &testServer{addr: ln.Addr().String(), srv: srv}
			first := ts.dial(t)
			first.do("PING")
			goroutines := runtime.NumGoroutine()
			const n = 50
			for range n {
				if got := ts.dial(t).do("CL.THROTTLE", "auto", "100", "1", "1"); !strings.HasPrefix(got, "*5\r\n:0\r\n") {
					t.Fatalf("CL.THROTTLE: %q", got)
				}
			}
			more := runtime.NumGoroutine() - goroutines
			if tc.loops && more > 5 {
				t.Fatalf("%d clients took %d more goroutines; want event loops", n, more)
			}
			if !tc.loops && more < n/2 {
				t.Fatalf("%d clients took %d more goroutines; want one each", n, more)
			}
		})
	}
}
