package respserver

import (
	"crypto/tls"
	"net"
	"time"
)

// TLS, as a Server serves it: a listener of crypto/tls (see Serve), whose
// connections are each served by a goroutine.

// DefaultHandshakeTimeout is the default bound on a TLS handshake: a client
// that connects and sends nothing is disconnected after it.
const DefaultHandshakeTimeout = 5 * time.Second

// handshake completes the TLS handshake of tc within the server's
// HandshakeTimeout, and reports whether it succeeded. Shutdown and Close
// end a handshake under way, as they end a read.
func (c *conn) handshake(tc *tls.Conn) bool {
	tc.SetDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		// Scanners and clients that do not trust the certificate fail
		// here, often: not worth more than a debug line each.
		c.s.log.Debug("resp: TLS handshake failed", "client", c.id, "addr", c.raddr, "err", err)
		return false
	}
	// Should Shutdown have begun meanwhile, serve sees it before it reads.
	tc.SetDeadline(time.Time{})
	return true
}

// tlsInput is what a TLS connection's Reader reads. Shutdown's drain asks
// it whether the client has sent more (poll): crypto/tls may hold records
// that it has read from the socket and not yet handed over, which a look
// into the socket does not see.
type tlsInput struct {
	tc      *tls.Conn
	pending []byte // read by poll, not yet by Read
}

func (t *tlsInput) Read(p []byte) (int, error) {
	if len(t.pending) > 0 {
		n := copy(p, t.pending)
		t.pending = t.pending[n:]
		return n, nil
	}
	return t.tc.Read(p)
}

// poll reports whether the connection holds input that can be read without
// waiting for the socket, and keeps it for Read. It leaves the read deadline
// in the past: the caller sets it again. (A read that times out leaves
// crypto/tls's state whole.)
func (t *tlsInput) poll() bool {
	if len(t.pending) > 0 {
		return true
	}
	t.tc.SetReadDeadline(time.Unix(1, 0))
	buf := make([]byte, 16<<10) // a record's plaintext at most; at shutdown only
	n, _ := t.tc.Read(buf)
	t.pending = buf[:n]
	return n > 0
}

// closeNow closes nc at once: a TLS connection's socket is closed under it,
// since closing the TLS connection first sends an alert, which may wait for
// a client that does not read.
func closeNow(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	nc.Close()
}
