package respserver

import (
	"bytes"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// socketPair returns the two ends of a stream socket pair, non-blocking,
// whose first end has a small send buffer, and a function that closes the
// second end. Both are closed when the test ends (the second only if the
// test has not closed it: its number may belong to another file by then).
func socketPair(t *testing.T) (a, b int, closeB func()) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<10); err != nil {
		t.Fatal(err)
	}
	closed := false
	closeB = func() {
		if !closed {
			closed = true
			unix.Close(fds[1])
		}
	}
	t.Cleanup(func() {
		unix.Close(fds[0])
		closeB()
	})
	return fds[0], fds[1], closeB
}

// testLconn returns an lconn over fd with an output limit of limit bytes.
func testLconn(fd, limit int) *lconn {
	s := &Server{cfg: Config{MaxOutputBuffer: limit}}
	lc := &lconn{fd: fd, slot: -1, budget: readBudget}
	lc.c = &conn{s: s}
	return lc
}

// drain reads everything fd has for now.
func drain(t *testing.T, fd int, into *bytes.Buffer) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		into.Write(buf[:n])
	}
}

// TestLconnPartialWrites writes more than the socket takes: what it does
// not take waits, later writes queue behind it, flushOut sends it as the
// peer reads, and the peer gets every byte in order.
func TestLconnPartialWrites(t *testing.T) {
	a, b, _ := socketPair(t)
	lc := testLconn(a, 1<<20)
	var sent, got bytes.Buffer
	for i := range 20 {
		p := bytes.Repeat([]byte{byte('a' + i)}, 10<<10+i)
		if n, err := lc.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write %d: %d, %v", i, n, err)
		}
		sent.Write(p)
	}
	if !lc.pending() {
		t.Fatal("200 KiB written to a socket of a few KiB, and nothing waits")
	}
	now := time.Now()
	for rounds := 0; lc.pending(); rounds++ {
		if rounds > 10000 {
			t.Fatal("flushOut makes no progress")
		}
		drain(t, b, &got)
		if err := lc.flushOut(now); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, b, &got)
	if !bytes.Equal(got.Bytes(), sent.Bytes()) {
		t.Fatalf("the peer got %d bytes, not the %d written in order", got.Len(), sent.Len())
	}
	if !lc.last.Equal(now) {
		t.Errorf("written replies do not count as activity")
	}
	if cap(lc.out) > keepOutBuf {
		t.Errorf("the output buffer keeps %d bytes once written", cap(lc.out))
	}
}

// TestLconnOutputLimit: replies that would wait beyond the limit are an
// error, which sticks.
func TestLconnOutputLimit(t *testing.T) {
	a, _, _ := socketPair(t)
	lc := testLconn(a, 64<<10)
	p := make([]byte, 32<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = lc.Write(p)
	}
	if !errors.Is(err, errOutputLimit) {
		t.Fatalf("Write past the limit: %v", err)
	}
	if len(lc.out)-lc.off > 64<<10 {
		t.Fatalf("%d bytes wait, over the limit", len(lc.out)-lc.off)
	}
	if _, err := lc.Write([]byte("x")); !errors.Is(err, errOutputLimit) {
		t.Fatalf("Write after the limit: %v", err)
	}
}

// TestLconnRead: a short read means the socket is empty, and the next Read
// says errWouldBlock without asking the socket; the budget bounds a
// wake-up's reads; the end of the input is io.EOF.
func TestLconnRead(t *testing.T) {
	a, b, closeB := socketPair(t)
	lc := testLconn(a, 1<<20)
	buf := make([]byte, 100)
	if n, err := lc.Read(buf); n != 0 || err != errWouldBlock {
		t.Fatalf("Read of an empty socket: %d, %v", n, err)
	}
	lc.drained = false
	unix.Write(b, []byte("hello"))
	if n, err := lc.Read(buf); n != 5 || err != nil {
		t.Fatalf("Read: %d, %v", n, err)
	}
	unix.Write(b, []byte("world"))
	if n, err := lc.Read(buf); n != 0 || err != errWouldBlock {
		t.Fatalf("Read after a short read: %d, %v; want errWouldBlock until the next wake-up", n, err)
	}
	lc.drained = false
	if n, err := lc.Read(buf); n != 5 || err != nil || string(buf[:n]) != "world" {
		t.Fatalf("Read at the next wake-up: %q, %v", buf[:n], err)
	}
	lc.drained, lc.budget = false, 3
	unix.Write(b, []byte("abcdef"))
	if n, err := lc.Read(buf[:3]); n != 3 || err != nil {
		t.Fatalf("Read within the budget: %d, %v", n, err)
	}
	if n, err := lc.Read(buf); n != 0 || err != errWouldBlock {
		t.Fatalf("Read past the budget: %d, %v", n, err)
	}
	lc.drained, lc.budget = false, readBudget
	closeB()
	if n, err := lc.Read(buf); n != 3 || err != nil {
		t.Fatalf("Read of the rest: %d, %v", n, err)
	}
	lc.drained = false
	if n, err := lc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end: %d, %v", n, err)
	}
}

// TestLconnWriteToClosedPeer: writing to a socket whose peer is gone is
// EPIPE, not a SIGPIPE, and the error sticks.
func TestLconnWriteToClosedPeer(t *testing.T) {
	a, _, closeB := socketPair(t)
	lc := testLconn(a, 1<<20)
	closeB()
	if _, err := lc.Write([]byte("+OK\r\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write to a closed peer: %v, want EPIPE", err)
	}
	if _, err := lc.Write([]byte("+OK\r\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("the next Write: %v", err)
	}
	if err := lc.flushOut(time.Now()); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("flushOut: %v", err)
	}
}
