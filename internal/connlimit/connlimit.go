// Package connlimit bounds the connections of a process: a bound per
// listener, and one shared by every listener (Slots), so that no listener
// can take the file descriptors that the others, and the process itself,
// need.
package connlimit

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Slots is a bound on connections shared by several listeners. The zero
// Slots admits nothing; create one with NewSlots. It is safe for concurrent
// use.
type Slots struct {
	max  int64
	used atomic.Int64
}

// NewSlots returns a bound of max connections; max ≤ 0 means no bound.
func NewSlots(max int) *Slots {
	if max <= 0 {
		max = 1<<63 - 1
	}
	return &Slots{max: int64(max)}
}

// TryAcquire takes a slot and reports whether there was one free. A nil
// Slots always has one.
func (s *Slots) TryAcquire() bool {
	if s == nil {
		return true
	}
	if s.used.Add(1) > s.max {
		s.used.Add(-1)
		return false
	}
	return true
}

// Release gives back a slot taken by TryAcquire.
func (s *Slots) Release() {
	if s != nil {
		s.used.Add(-1)
	}
}

// Used returns the slots taken now.
func (s *Slots) Used() int {
	if s == nil {
		return 0
	}
	return int(s.used.Load())
}

// Listener is a net.Listener that holds at most Max connections at once, and
// takes one of Shared's slots for each. A connection accepted over either
// bound is closed at once, and Accept goes on to the next: the client sees
// its connection closed (a TLS or HTTP/2 client, before any handshake),
// instead of waiting in the kernel's backlog, and the process never runs out
// of descriptors for its other listeners. A connection counts until it is
// closed.
type Listener struct {
	net.Listener
	max    int64
	shared *Slots

	open, refused atomic.Int64

	mu      sync.Mutex
	backoff time.Duration
}

// NewListener bounds ln to max connections at once (max ≤ 0: no bound of
// its own) and to shared's slots (nil: none).
func NewListener(ln net.Listener, max int, shared *Slots) *Listener {
	if max <= 0 {
		max = 1<<63 - 1
	}
	return &Listener{Listener: ln, max: int64(max), shared: shared}
}

// Accept returns the next connection within the bounds. It closes those
// over them, and waits a little after an accept that failed for want of
// descriptors, as net/http does, rather than return the error (which would
// stop a server's Serve).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				l.wait()
				continue
			}
			return nil, err
		}
		l.mu.Lock()
		l.backoff = 0
		l.mu.Unlock()
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(nc)
			continue
		}
		if !l.shared.TryAcquire() {
			l.open.Add(-1)
			l.refuse(nc)
			continue
		}
		return &conn{Conn: nc, l: l}, nil
	}
}

// wait sleeps after a failed accept: 5 ms, doubling up to a second.
func (l *Listener) wait() {
	l.mu.Lock()
	l.backoff = min(max(2*l.backoff, 5*time.Millisecond), time.Second)
	d := l.backoff
	l.mu.Unlock()
	time.Sleep(d)
}

func (l *Listener) refuse(nc net.Conn) {
	l.refused.Add(1)
	nc.Close()
}

// Open returns the connections open now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused returns how many connections were closed for being over a bound.
func (l *Listener) Refused() int64 { return l.refused.Load() }

// conn is a connection of a Listener: closing it frees its place.
type conn struct {
	net.Conn
	l    *Listener
	done atomic.Bool
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if !c.done.Swap(true) {
		c.l.open.Add(-1)
		c.l.shared.Release()
	}
	return err
}

// CloseWrite ends the connection's output, when the connection can.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
