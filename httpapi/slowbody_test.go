package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/httpapi"
	"github.com/funnelrl/funnel/internal/httpreply"
	"github.com/funnelrl/funnel/memstore"
)

// TestSlowBody sends the headers of a request, then its body one byte at a
// time, far more slowly than the server's ReadTimeout allows, over a real
// TCP connection. The server gives up reading, and the answer must say so:
// 408 with a problem, never an empty 200 that a client would take for a
// decision.
func TestSlowBody(t *testing.T) {
	// As the daemon's listener does, with a ReadTimeout short enough for a
	// test: it bounds the headers and the body together.
	srv := rawServer(t, 200*time.Millisecond)

	// Leading white space is valid JSON, and keeps the value incomplete:
	// at one byte every 20 ms the body would take 5 s, 25 times the
	// ReadTimeout.
	const tick = 20 * time.Millisecond
	body := strings.Repeat(" ", 250) + `{"key":"k","limit":{"count":10,"period":"1s"}}`
	for _, path := range []string{"/v1/throttle", "/v1/refund", "/v1/acquire", "/v1/release"} {
		t.Run(strings.TrimPrefix(path, "/v1/"), func(t *testing.T) {
			t.Parallel()
			conn := dialHead(t, srv, path, len(body))
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				ticker := time.NewTicker(tick)
				defer ticker.Stop()
				for i := 0; i < len(body); i++ {
					select {
					case <-done:
						return
					case <-ticker.C:
					}
					if _, err := conn.Write([]byte{body[i]}); err != nil {
						return // the server has closed the connection
					}
				}
			})
			defer wg.Wait()
			defer close(done)
			readProblem(t, conn, http.StatusRequestTimeout)
		})
	}
}

// TestShortBody: a client that sends less body than its Content-Length and
// closes its side of the connection gets a 400 problem, not an empty 200.
func TestShortBody(t *testing.T) {
	srv := rawServer(t, 10*time.Second)
	body := `{"key":"k","limit":{"count":10,"period":"1s"}}`
	conn := dialHead(t, srv, "/v1/throttle", len(body)+10)
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	p := readProblem(t, conn, http.StatusBadRequest)
	if p.Detail != "httpapi: the body could not be read" {
		t.Errorf("detail %q", p.Detail)
	}
}

// rawServer serves the API over a memory store on 127.0.0.1:0 with the
// given ReadTimeout (and ReadHeaderTimeout).
func rawServer(t *testing.T, readTimeout time.Duration) *httptest.Server {
	t.Helper()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewUnstartedServer(httpapi.New(funnel.New(st), httpapi.Options{Logger: quiet()}))
	srv.Config.ReadHeaderTimeout = readTimeout
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// dialHead connects to srv and sends the headers of a POST to path with a
// JSON body of length bytes, and no byte of the body.
func dialHead(t *testing.T, srv *httptest.Server, path string, length int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// Not a timing assertion: a bound so that a server that never answers
	// fails the test rather than hanging it.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	head := "POST " + path + " HTTP/1.1\r\nHost: funnel\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(length) + "\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readProblem reads the answer on conn and checks that it is a problem of
// the given status.
func readProblem(t *testing.T, conn net.Conn, status int) httpreply.Problem {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if resp.StatusCode != status {
		t.Fatalf("%s %q, want %d", resp.Status, b, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != httpreply.ProblemContentType {
		t.Errorf("Content-Type %q", ct)
	}
	var p httpreply.Problem
	if err := json.Unmarshal(b, &p); err != nil || p.Status != status || p.Title != http.StatusText(status) {
		t.Errorf("problem %q: %v", b, err)
	}
	return p
}
