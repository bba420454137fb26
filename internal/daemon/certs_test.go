package daemon_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"os/exec"
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
	path := redistest.Binary(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	// No history, preferences or proxy of the machine's user.
	cmd.Env = append(cmd.Environ(), "REDISCLI_HISTFILE=/dev/null", "REDISCLI_RCFILE=/dev/null", "CURL_HOME=/nonexistent", "NO_PROXY=*", "no_proxy=*")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok || ctx.Err() != nil {
			t.Fatalf("%s %q: %v\n%s%s", name, args, err, stdout.String(), stderr.String())
		}
		code = ee.ExitCode()
	}
	return stdout.String() + stderr.String(), code
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
