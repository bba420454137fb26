package server

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
	args := [][]byte{[]byte("CL.THROTTLE"), []byte("user:12345"), []byte("1000000"), []byte("1000000"), []byte("1")}
	b.ReportAllocs()
	for b.Loop() {
		cmdThrottle(c, args)
		c.wr.Flush()
	}
}

// BenchmarkCmdGCRA is BenchmarkCmdThrottle for Redis's GCRA command.
func BenchmarkCmdGCRA(b *testing.B) {
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
	args := [][]byte{[]byte("GCRA"), []byte("user:12345"), []byte("1000000"), []byte("1000000"), []byte("1"), []byte("TOKENS"), []byte("1")}
	b.ReportAllocs()
	for b.Loop() {
		cmdGCRA(c, args)
		c.wr.Flush()
	}
}
