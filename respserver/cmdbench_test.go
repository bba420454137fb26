package respserver

import (
	"io"
	"net"
	"testing"

	"github.com/funnelrl/funnel/memstore"
)

// BenchmarkCmdThrottle is the server's work for one CL.THROTTLE on a hot
// key, from parsed arguments to the reply in the write buffer: no network.
// Each reply is flushed to io.Discard.
func BenchmarkCmdThrottle(b *testing.B) {
	benchCmd(b, cmdThrottle, "CL.THROTTLE", "user:12345", "1000000", "1000000", "1")
}

// BenchmarkCmdGCRA is BenchmarkCmdThrottle for Redis's GCRA command.
func BenchmarkCmdGCRA(b *testing.B) {
	benchCmd(b, cmdGCRA, "GCRA", "user:12345", "1000000", "1000000", "1", "TOKENS", "1")
}

// benchCmd runs cmd with args on a connection of a server over the memory
// store, each reply flushed to io.Discard.
func benchCmd(b *testing.B, cmd func(*conn, [][]byte), args ...string) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	s := New(st, Config{})
	a, z := net.Pipe()
	defer a.Close()
	defer z.Close()
	c := newConn(s, a, struct {
		io.Reader
		io.Writer
	}{a, io.Discard})
	argv := make([][]byte, len(args))
	for i, v := range args {
		argv[i] = []byte(v)
	}
	b.ReportAllocs()
	for b.Loop() {
		cmd(c, argv)
		c.wr.Flush()
	}
}
