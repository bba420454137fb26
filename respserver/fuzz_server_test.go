package respserver_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/resp"
	"github.com/funnelrl/funnel/respserver"
)

// FuzzServer feeds arbitrary bytes to one connection of a running server,
// then leaves. The server must not crash (a panic in any of its goroutines
// ends the test binary), must close or keep serving that connection, and
// must still answer PING on a fresh one.
func FuzzServer(f *testing.F) {
	for _, seed := range []string{
		"PING\r\n",
		multibulk("CL.THROTTLE", "k", "15", "30", "60") + multibulk("CL.THROTTLE", "k", "15", "30", "60", "100"),
		multibulk("CL.THROTTLE", "k", "-1", "9223372036854775807", "1", "-5"),
		multibulk("HELLO", "3", "AUTH", "default", "x", "SETNAME", "n") + multibulk("CLIENT", "LIST") + multibulk("RESET"),
		multibulk("COMMAND", "DOCS") + multibulk("COMMAND") + multibulk("INFO", "everything"),
		multibulk("CONFIG", "GET", "*[") + multibulk("CLIENT", "TRACKING", "ON", "OPTIN"),
		multibulk("DEL", "k", "\x00") + multibulk("EXISTS", "k") + multibulk("PTTL", "k") + multibulk("TTL", "k"),
		"*2\r\n$4\r\nECHO\r\n$-1\r\n",
		"*1048577\r\n",
		"*3\r\n$4\r\nECHO\r\n",
		"ECHO \"unbalanced\r\n",
		"\x00\xff\r\n\r\n*0\r\n*-1\r\n",
		"QUIT\r\nPING\r\n",
		"*1\r\n$4\r\nPING\r\n*1\r\n:4\r\n",
		"SELECT 1\nSELECT 0\nAUTH a b c\nFOO\n",
		multibulk("FUNNEL.ALLOW", "k", "fixed_window", "3", "1000", "BAN", "10") + multibulk("FUNNEL.BANS") + multibulk("FUNNEL.UNBAN", "k"),
		multibulk("FUNNEL.ALLOWALL", "2", "LIMIT", "{a}1", "gcra", "1", "1000", "LIMIT", "{a}2", "sliding_log", "2", "1000", "QUANTITY", "3"),
		multibulk("GCRA", "g", "5", "10", "60") + multibulk("GCRA", "g", "5", "10", "0.25", "TOKENS", "3") + multibulk("GCRA", "g", "0", "1", "1e-7", "TOKENS"),
		multibulk("FUNNEL.CHARGE", "k", "gcra", "1", "1000", "QUANTITY", "9") + multibulk("FUNNEL.ALLOW", "k", "gcra", "1", "1000", "QUANTITY", "3", "PEEK") +
			multibulk("FUNNEL.CHARGE", "k", "gcra", "1", "1000", "QUANTITY", "9223372036854775807") + multibulk("FUNNEL.CHARGE", "k", "gcra", "1", "1000", "PEEK"),
		multibulk("FUNNEL.RESERVE", "r", "gcra", "10", "1000", "QUANTITY", "4", "TTL", "60000") + multibulk("FUNNEL.SETTLE", "r", "00000000000000000000000000000000", "9") +
			multibulk("FUNNEL.SETTLE", "r", "x", "-1") + multibulk("FUNNEL.RESERVE", "r", "sliding_log", "3", "1000", "QUANTITY", "0", "TTL", "0") + multibulk("FUNNEL.SETTLE", "r"),
		multibulk("FUNNEL.ACQUIRE", "j", "1", "1000", "ID", "x") + multibulk("FUNNEL.RELEASE", "j", "x") + multibulk("FUNNEL.REFUND", "k", "sliding_window", "3", "1000"),
	} {
		f.Add([]byte(seed))
	}
	ts := startServer(f, respserver.Config{Limits: resp.Limits{MaxQueryBuffer: 64 << 10}})
	f.Fuzz(func(t *testing.T, in []byte) {
		nc, err := net.DialTimeout("tcp", ts.addr, waitFor)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// Write while reading: the replies must not wait for the input.
		go func() {
			nc.SetWriteDeadline(time.Now().Add(waitFor))
			nc.Write(in)
			nc.(*net.TCPConn).CloseWrite()
		}()
		nc.SetReadDeadline(time.Now().Add(waitFor))
		_, err = io.Copy(io.Discard, nc)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the server kept the connection open %v after the input ended", waitFor)
		}
		c := &client{t: t, nc: nil}
		c.nc, err = net.DialTimeout("tcp", ts.addr, waitFor)
		if err != nil {
			t.Fatalf("a fresh connection: %v", err)
		}
		defer c.nc.Close()
		c.br = bufio.NewReader(c.nc)
		if got := c.do("PING"); !strings.HasPrefix(got, "+PONG") {
			t.Fatalf("PING on a fresh connection: %q", got)
		}
	})
}
