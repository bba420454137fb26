package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/testcerts"
)

// A client presents the certificate of its files as they are at each
// handshake: after a rotation, the next connection shows the new one.
func TestClientConfigRotates(t *testing.T) {
	t.Parallel()
	serverCA, clientCA := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "client-ca")
	srv := newFiles(t)
	srv.write(t, serverCA.Server(t, "server"), clientCA.PEM)
	sw, err := New(Options{CertFile: srv.cert, KeyFile: srv.key, ClientCAFile: srv.ca, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, sw.Config())

	cf := newFiles(t)
	cf.write(t, clientCA.Client(t, "client-1"), nil)
	cw, err := New(Options{CertFile: cf.cert, KeyFile: cf.key, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	roots, err := LoadCAs(serverCA.Write(t, t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	dial := func() string {
		t.Helper()
		cfg := cw.ClientConfig()
		cfg.RootCAs, cfg.ServerName = roots, "localhost"
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := dial(); got != "client-1" {
		t.Fatalf("the server saw %q", got)
	}
	cf.write(t, clientCA.Client(t, "client-2"), nil)
	if err := cw.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := dial(); got != "client-2" {
		t.Fatalf("after the rotation, the server saw %q", got)
	}
}

func TestLoadCAs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := testcerts.NewCA(t, "a"), testcerts.NewCA(t, "b")
	both := filepath.Join(dir, "both.crt")
	if err := os.WriteFile(both, append(append([]byte{}, a.PEM...), b.PEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	pool, err := LoadCAs(both)
	if err != nil || !pool.Equal(func() *x509.CertPool { p := a.Pool(); p.AddCert(b.Cert); return p }()) {
		t.Fatalf("LoadCAs: %v", err)
	}
	key := filepath.Join(dir, "key.pem")
	os.WriteFile(key, a.Client(t, "c").Key, 0o600)
	cut := filepath.Join(dir, "cut.crt")
	os.WriteFile(cut, a.PEM[:len(a.PEM)/2], 0o600)
	empty := filepath.Join(dir, "empty.crt")
	os.WriteFile(empty, nil, 0o600)
	for file, want := range map[string]string{
		filepath.Join(dir, "missing"): "no such file",
		key:                           "a PRIVATE KEY block where certificates are expected",
		cut:                           "a PEM block is cut short",
		empty:                         "no certificate",
	} {
		if _, err := LoadCAs(file); err == nil || !strings.HasPrefix(err.Error(), "tlsfiles: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadCAs(%s): %v, want %q", filepath.Base(file), err, want)
		}
	}
}
