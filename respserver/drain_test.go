package respserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funnelrl/funnel/respserver"
)

// drainClient is one connection of TestServerShutdownDrainsPipelines: what
// it sent, what came back, and how the connection ended.
type drainClient struct {
	nc       net.Conn
	sent     int   // commands written
	answered int   // replies read
	lines    int   // reply lines read: five integers and a header each
	reset    bool  // the connection was reset
	err      error // how reading ended, other than EOF or a reset
}

// read reads replies until the server closes the connection, counting them
// by their first byte ('*', which an integer reply does not hold).
func (dc *drainClient) read() {
	buf := make([]byte, 64<<10)
	for {
		dc.nc.SetReadDeadline(time.Now().Add(waitFor))
		n, err := dc.nc.Read(buf)
		dc.answered += bytes.Count(buf[:n], []byte{'*'})
		dc.lines += bytes.Count(buf[:n], []byte{'\n'})
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
		case errors.Is(err, syscall.ECONNRESET):
			dc.reset = true
		default:
			dc.err = err
		}
		return
	}
}

// TestServerShutdownDrainsPipelines: clients pipeline many CL.THROTTLE
// commands, and the server is shut down as soon as the last of them is
// written. Every command is answered, and every connection ends with an
// EOF after its last reply, never a reset: the commands still in the
// sockets' buffers when Shutdown begins are read and answered. It runs in
// both of the suite's modes and logs the figures of the drill.
func TestServerShutdownDrainsPipelines(t *testing.T) {
	t.Parallel()
	// With -race, 50,000 commands a connection leave more in the sockets'
	// buffers when Shutdown begins than the server answers in a tenth of a
	// second: a drain bounded by a fixed time loses some of them.
	const (
		conns = 10
		per   = 50000 // commands per connection
		chunk = 1000  // commands per write
	)
	ts := startServer(t, respserver.Config{})
	clients := make([]*drainClient, conns)
	var reading, writing sync.WaitGroup
	for i := range clients {
		nc, err := net.DialTimeout("tcp", ts.addr, waitFor)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		dc := &drainClient{nc: nc}
		clients[i] = dc
		reading.Go(dc.read)
		cmd := strings.Repeat(multibulk("CL.THROTTLE", "drain"+strconv.Itoa(i), "1000000000", "1", "1"), chunk)
		writing.Go(func() {
			for dc.sent < per {
				nc.SetWriteDeadline(time.Now().Add(waitFor))
				if _, err := io.WriteString(nc, cmd); err != nil {
					t.Errorf("client %d: writing after %d commands: %v", i, dc.sent, err)
					return
				}
				dc.sent += chunk
			}
		})
	}
	writing.Wait()
	// A connection still in the listener's backlog when Shutdown closes the
	// listener is reset by the kernel: the drill is about the connections
	// the server has accepted.
	poll(t, "every connection to be accepted", func() bool { return ts.srv.Stats().Accepted == conns })
	start := time.Now()
	// The deadline only keeps a broken drain from hanging the test.
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitFor)
	defer cancel()
	serr := ts.srv.Shutdown(ctx)
	took := time.Since(start)
	reading.Wait()

	var sent, answered, resets int
	for _, dc := range clients {
		sent += dc.sent
		answered += dc.answered
		if dc.reset {
			resets++
		}
	}
	// The figures of the drill, for a reader of -v: held (answered), lost,
	// and the connections reset.
	t.Logf("shutdown drill, Config.EventLoops %d: sent %d, answered %d, lost %d, reset %d of %d connections; Shutdown took %v",
		testEventLoops, sent, answered, sent-answered, resets, conns, took.Round(time.Millisecond))
	if serr != nil {
		t.Errorf("Shutdown: %v", serr)
	}
	for i, dc := range clients {
		switch {
		case dc.reset:
			t.Errorf("client %d: the connection was reset after %d replies of %d", i, dc.answered, dc.sent)
		case dc.err != nil:
			t.Errorf("client %d: reading after %d replies of %d: %v", i, dc.answered, dc.sent, dc.err)
		case dc.answered != dc.sent:
			t.Errorf("client %d: %d replies to %d commands", i, dc.answered, dc.sent)
		case dc.lines != 6*dc.answered:
			t.Errorf("client %d: %d reply lines for %d replies, want 6 each", i, dc.lines, dc.answered)
		}
	}
	if st := ts.srv.Stats(); st.Clients != 0 || st.Commands != int64(sent) || st.Allowed != int64(sent) {
		t.Errorf("Stats after Shutdown: %+v, want %d commands allowed", st, sent)
	}
}
