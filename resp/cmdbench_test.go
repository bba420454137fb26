package resp

import (
	"bytes"
	"net"
	"testing"

	"github.com/funnelrl/funnel/memstore"
)

// BenchmarkCmdThrottle is the server's work for one CL.THROTTLE on a hot
// key, from parsed arguments to the reply in the write buffer: no network.
func BenchmarkCmdThrottle(b *testing.B) {
	st := memstore.New(memstore.Options{})
	defer st.Close()
	s := NewServer(st, Config{})
	a, z := net.Pipe()
	defer a.Close()
	defer z.Close()
	var out bytes.Buffer
	c := newConn(s, a, &struct {
		*bytes.Buffer
	}{&out})
	args := [][]byte{[]byte("CL.THROTTLE"), []byte("user:12345"), []byte("1000000"), []byte("1000000"), []byte("1")}
	b.ReportAllocs()
	for b.Loop() {
		cmdThrottle(c, args)
		c.wr.buf = c.wr.buf[:0]
	}
}
