package respserver

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/storetest"
)

// A connection keeps the text of its last valid CL.THROTTLE limit and
// reuses the limit parsed then: a random sequence of CL.THROTTLE commands
// (limits that repeat, differ by a byte, are invalid, or too long to keep;
// quantities valid and not) answers on one connection exactly what each
// command answers on a connection of its own.
func TestThrottleLimitReused(t *testing.T) {
	clock := storetest.NewClock(storetest.Day0)
	newServer := func() *Server {
		st := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
		t.Cleanup(func() { st.Close() })
		return New(st, Config{})
	}
	one, fresh := newServer(), newServer()
	a, z := net.Pipe()
	t.Cleanup(func() { a.Close(); z.Close() })
	var kept bytes.Buffer
	c := newConn(one, a, struct {
		io.Reader
		io.Writer
	}{a, &kept})
	limits := [][3]string{
		{"10", "20", "60"}, {"10", "20", "6"}, {"10", "2", "60"}, {"1", "020", "60"}, {"10", "20", "60 "},
		{"10", "0", "60"}, {"-1", "20", "60"}, {"x", "20", "60"}, {"10", "20", "1234567890123456"},
		{"10", "20", "123456789012345"}, {"9223372036854775807", "1", "1"}, {"0", "1", "9223372036854775807"},
	}
	quantities := []string{"", "1", "0", "5", "-2", "abc", "9223372036854775807", "1000"}
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		l := limits[r.IntN(len(limits))]
		if r.IntN(3) > 0 {
			l = limits[0] // mostly the same limit, as clients send
		}
		args := [][]byte{[]byte("CL.THROTTLE"), []byte(fmt.Sprintf("k%d", r.IntN(3))), []byte(l[0]), []byte(l[1]), []byte(l[2])}
		if q := quantities[r.IntN(len(quantities))]; q != "" {
			args = append(args, []byte(q))
		}
		kept.Reset()
		cmdThrottle(c, args)
		c.wr.Flush()
		var alone bytes.Buffer
		fc := newConn(fresh, a, struct {
			io.Reader
			io.Writer
		}{a, &alone})
		cmdThrottle(fc, args)
		fc.wr.Flush()
		if kept.String() != alone.String() {
			t.Fatalf("command %d %q: %q on a connection that kept its limit, %q on its own", i, args, kept.String(), alone.String())
		}
		clock.Add(time.Duration(r.IntN(3)) * 100 * time.Millisecond)
	}
}
