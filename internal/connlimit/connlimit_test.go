package connlimit_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/connlimit"
)

const waitFor = 10 * time.Second

// serve accepts on l and keeps the connections open, sending each an "x"
// once accepted; it stops when l is closed.
func serve(t *testing.T, l *connlimit.Listener) chan net.Conn {
	t.Helper()
	accepted := make(chan net.Conn, 100)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			nc.Write([]byte("x"))
			accepted <- nc
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for nc := range accepted {
			nc.Close()
		}
	})
	return accepted
}

func listen(t *testing.T, max int, shared *connlimit.Slots) *connlimit.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return connlimit.NewListener(ln, max, shared)
}

// dial connects to l and reports whether the connection was accepted (the
// server sent "x") or closed.
func dial(t *testing.T, l *connlimit.Listener) (net.Conn, bool) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", l.Addr().String(), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetReadDeadline(time.Now().Add(waitFor))
	var b [1]byte
	_, err = io.ReadFull(nc, b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("neither accepted nor closed after %v", waitFor)
	}
	return nc, err == nil
}

// TestListener fills a listener's own bound, then the bound it shares with
// another: the connection over either is closed at once, the other listener
// goes on accepting within the shared bound, and a connection that closes
// gives its places back.
func TestListener(t *testing.T) {
	t.Parallel()
	shared := connlimit.NewSlots(3)
	a, b := listen(t, 2, shared), listen(t, 0, shared)
	acceptedA, acceptedB := serve(t, a), serve(t, b)
	for i := range 2 {
		if _, ok := dial(t, a); !ok {
			t.Fatalf("connection %d of 2 refused", i+1)
		}
	}
	if _, ok := dial(t, a); ok {
		t.Fatal("the third connection of a listener of 2 was accepted")
	}
	if _, ok := dial(t, b); !ok {
		t.Fatal("the other listener refused its first connection")
	}
	if _, ok := dial(t, b); ok {
		t.Fatal("a fourth connection within a shared bound of 3 was accepted")
	}
	if a.Open() != 2 || b.Open() != 1 || shared.Used() != 3 || a.Refused() != 1 || b.Refused() != 1 {
		t.Fatalf("open %d and %d, used %d, refused %d and %d; want 2, 1, 3, 1, 1", a.Open(), b.Open(), shared.Used(), a.Refused(), b.Refused())
	}
	nc := <-acceptedA
	nc.Close()
	nc.Close() // a second Close gives nothing back
	if a.Open() != 1 || shared.Used() != 2 {
		t.Fatalf("after a close: open %d, used %d; want 1, 2", a.Open(), shared.Used())
	}
	if _, ok := dial(t, b); !ok {
		t.Fatal("the place freed by a close was not given")
	}
	<-acceptedB
}
