package respserver_test

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/respserver"
)

// TestServerClientsThatNeverRead is a fault drill: twenty clients pipeline
// CL.THROTTLE commands for as long as the server takes them and never read
// a reply, while a healthy client makes decisions. The healthy client gets
// every answer; the server holds each silent client's replies within its
// bounds (MaxOutputBuffer with event loops; a blocked write with a
// goroutine per connection) and closes it once it has taken none of its
// replies for IdleTimeout; only the healthy client is left. It runs in both of
// the suite's modes and logs the figures of the drill.
func TestServerClientsThatNeverRead(t *testing.T) {
	// Not parallel: twenty clients writing as fast as they can would starve
	// the other tests of a small machine.
	// An IdleTimeout of seconds: the healthy client must not be idle that
	// long while the silent ones start (and starve a small machine: 3 s
	// was not enough once, under -race beside other builds), and the
	// silent ones must be closed well within waitFor.
	const silent, decisions = 20, 500
	ts := startServer(t, respserver.Config{IdleTimeout: 5 * time.Second, MaxOutputBuffer: 64 << 10})
	healthy := ts.dial(t)
	healthy.do("PING")

	// Each writes up to 4 MiB, far more than the server takes before its
	// replies wait (with small socket buffers).
	pipeline := strings.Repeat("*5\r\n$11\r\nCL.THROTTLE\r\n$1\r\nk\r\n$2\r\n15\r\n$2\r\n30\r\n$2\r\n60\r\n", 1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	sentBytes, blocked := 0, 0
	conns := make([]net.Conn, silent)
	for i := range conns {
		nc, err := net.DialTimeout("tcp", ts.addr, waitFor)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = nc
		t.Cleanup(func() { nc.Close() })
		// Small socket buffers: the server's writes block after a few
		// replies, and the kernel holds little of what the client writes.
		nc.(*net.TCPConn).SetReadBuffer(4 << 10)
		nc.(*net.TCPConn).SetWriteBuffer(64 << 10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for n < 4<<20 {
				// A write that cannot go on for a while means the server
				// and the kernel hold all they will.
				nc.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				w, err := nc.Write([]byte(pipeline))
				n += w
				if err != nil {
					break
				}
			}
			mu.Lock()
			sentBytes += n
			if n < 4<<20 {
				blocked++
			}
			mu.Unlock()
		}()
	}

	var slowest time.Duration
	healthy.do("PING")
	for i := 0; i < decisions; i++ {
		start := time.Now()
		if got := healthy.do("CL.THROTTLE", "healthy", "1000000", "1", "1"); !strings.HasPrefix(got, "*5\r\n:0\r\n") {
			t.Fatalf("decision %d of the healthy client: %q", i, got)
		}
		slowest = max(slowest, time.Since(start))
	}
	wg.Wait()
	// The silent clients send nothing more and read nothing: the idle
	// timeout closes them, and only the healthy client stays.
	start := time.Now()
	poll(t, "the silent clients to be closed", func() bool {
		healthy.do("PING") // the healthy client is never idle
		return ts.srv.Stats().Clients == 1
	})
	closedAfter := time.Since(start)
	if got := healthy.do("PING"); got != simple("PONG") {
		t.Fatalf("the healthy client after the drill: %q", got)
	}
	t.Logf("never-read drill, Config.EventLoops %d (the suite's mode): %d silent clients wrote %d MiB of pipelines (%d stopped by backpressure) and read nothing; "+
		"the healthy client got %d of %d answers, the slowest in %v; the silent clients were closed %v after their last write",
		testEventLoops, silent, sentBytes>>20, blocked, decisions, decisions, slowest.Round(time.Microsecond), closedAfter.Round(time.Millisecond))
}
