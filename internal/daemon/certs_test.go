package daemon_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// serial numbers the certificates of the tests apart.
var serial atomic.Int64

// testCA is a certificate authority made for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// pool returns a pool of the CA alone.
func (c *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// pair is a certificate and its key, in PEM.
type pair struct{ cert, key []byte }

// issue returns a certificate named cn, for a server (localhost and
// 127.0.0.1) or for a client.
func (c *testCA) issue(t *testing.T, cn string, client bool) pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames, tmpl.IPAddresses = nil, nil
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pair{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k}),
	}
}

// tlsCert returns p for a crypto/tls client.
func (p pair) tlsCert(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.cert, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// write writes p into dir as name.crt and name.key, and returns their
// paths.
func (p pair) write(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, cert, p.cert)
	writeFile(t, key, p.key)
	return cert, key
}

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
// printed (stdout, then stderr) and its exit code. It skips the test when
// the tool is not on PATH.
func tool(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not on PATH", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	// No history, preferences or proxy of the machine's user.
	cmd.Env = append(cmd.Environ(), "REDISCLI_HISTFILE=/dev/null", "REDISCLI_RCFILE=/dev/null", "CURL_HOME=/nonexistent", "NO_PROXY=*", "no_proxy=*")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
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

// redisCLI returns a runner of redis-cli against addr, or skips the test
// when redis-cli is missing or was built without TLS.
func redisCLI(t *testing.T, addr string) func(args ...string) (string, int) {
	t.Helper()
	if help, _ := tool(t, "redis-cli", "--help"); !strings.Contains(help, "--tls") {
		t.Skip("redis-cli was built without TLS")
	}
	host, port, _ := net.SplitHostPort(addr)
	return func(args ...string) (string, int) {
		t.Helper()
		return tool(t, "redis-cli", append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...)
	}
}
