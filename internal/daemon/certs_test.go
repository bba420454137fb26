package daemon_test

import (
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/funnelrl/funnel/internal/redistest"
)

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedCert dials addr over TLS as a client of cfg and returns the name
// of the certificate the server presents.
func servedCert(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: waitFor}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// tool runs a command-line client with a timeout and returns what it
// printed (stdout, then stderr) and its exit code. When the tool is not on
// PATH it skips the test, or fails it under CI (redistest.Binary).
func tool(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	// No proxy or curl preferences of the machine's user either.
	return redistest.RunTool(t, name, "", waitFor, []string{"CURL_HOME=/nonexistent", "NO_PROXY=*", "no_proxy=*"}, args...)
}

// redisCLI returns a runner of redis-cli against addr. When redis-cli is
// missing or was built without TLS it skips the test, or fails it under CI.
func redisCLI(t *testing.T, addr string) func(args ...string) (string, int) {
	t.Helper()
	if help, _ := tool(t, "redis-cli", "--help"); !strings.Contains(help, "--tls") {
		redistest.Missing(t, "redis-cli was built without TLS")
	}
	host, port, _ := net.SplitHostPort(addr)
	return func(args ...string) (string, int) {
		t.Helper()
		return tool(t, "redis-cli", append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...)
	}
}
