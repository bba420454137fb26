package respserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/memstore"
)

// gateStore is a store whose first call waits until gate is closed.
type gateStore struct {
	funnel.Store
	entered chan struct{} // closed when the first call has begun
	gate    chan struct{}
	once    sync.Once
}

func (g *gateStore) Do(ctx context.Context, ops []funnel.Op, res []funnel.Result) error {
	g.once.Do(func() { close(g.entered); <-g.gate })
	return g.Store.Do(ctx, ops, res)
}

// TestShutdownLateInput: the client's last bytes reach the server's socket
// just after the drain has found it empty (sent in answer to the window
// that the server's last replies opened, they are in flight while it
// looks). The connection still ends without a reset: the client reads the
// reply to every command the server had read, then the end of the stream.
// Closed with those bytes unread, the socket was reset, and the client read
// "connection reset by peer" after its reply (a reset that comes before
// them drops replies still in the server's send buffer).
func TestShutdownLateInput(t *testing.T) {
	t.Parallel()
	ms := memstore.New(memstore.Options{})
	t.Cleanup(func() { ms.Close() })
	st := &gateStore{Store: ms, entered: make(chan struct{}), gate: make(chan struct{})}
	srv := New(st, Config{EventLoops: -1, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))

	srv.testHookDrained = func(sc net.Conn) {
		// The client's last command reaches the socket now: wait until the
		// socket holds it.
		if _, err := io.WriteString(nc, "*1\r\n$4\r\nPING\r\n"); err != nil {
			t.Error(err)
			return
		}
		rc, err := sc.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		for waiting := false; !waiting; {
			if err := rc.Control(func(fd uintptr) { waiting = inputWaiting(int(fd)) }); err != nil {
				t.Error(err)
				return
			}
		}
	}
	// The server is running the command when Shutdown begins.
	if _, err := io.WriteString(nc, "*5\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$2\r\n10\r\n$1\r\n1\r\n$1\r\n1\r\n"); err != nil {
		t.Fatal(err)
	}
	<-st.entered
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	for !srv.closing.Load() {
		runtime.Gosched()
	}
	close(st.gate)

	got, err := io.ReadAll(nc)
	if want := "*5\r\n:0\r\n:11\r\n:10\r\n:-1\r\n:1\r\n"; string(got) != want || err != nil {
		t.Errorf("the client read %q, %v; want %q and the end of the stream", got, err, want)
	}
	nc.Close()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
