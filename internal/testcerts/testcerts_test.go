package testcerts_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/testcerts"
)

// parse returns the certificate of p.
func parse(t *testing.T, p testcerts.Pair) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(p.Cert)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("not a PEM certificate: %q", p.Cert)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A server certificate is trusted by its CA's pool alone, for localhost
// and 127.0.0.1 and as a server; a client certificate as a client only.
func TestVerify(t *testing.T) {
	ca, other := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "other")
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "ca" {
		t.Fatalf("CA certificate: IsCA %v, name %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	server, client := parse(t, ca.Server(t, "server")), parse(t, ca.Client(t, "client"))
	if server.Subject.CommonName != "server" || client.Subject.CommonName != "client" {
		t.Fatalf("names %q, %q", server.Subject.CommonName, client.Subject.CommonName)
	}
	if server.SerialNumber.Cmp(client.SerialNumber) == 0 || server.SerialNumber.Cmp(ca.Cert.SerialNumber) == 0 {
		t.Fatalf("serial numbers repeat: %v, %v, %v", ca.Cert.SerialNumber, server.SerialNumber, client.SerialNumber)
	}
	now := time.Now()
	if now.Before(server.NotBefore) || now.Add(time.Hour).After(server.NotAfter) {
		t.Fatalf("server certificate valid from %v to %v", server.NotBefore, server.NotAfter)
	}
	verify := func(c *x509.Certificate, pool *x509.CertPool, name string, usage x509.ExtKeyUsage) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	for _, name := range []string{"localhost", "127.0.0.1"} {
		if err := verify(server, ca.Pool(), name, x509.ExtKeyUsageServerAuth); err != nil {
			t.Errorf("server certificate for %s: %v", name, err)
		}
	}
	if err := verify(server, ca.Pool(), "example.com", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("the server certificate is valid for example.com")
	}
	if err := verify(server, other.Pool(), "localhost", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("another CA trusts the server certificate")
	}
	if err := verify(client, ca.Pool(), "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if err := verify(client, ca.Pool(), "", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("the client certificate serves as a server's")
	}
}

// A server and a client of the certificates complete a mutual handshake.
func TestHandshake(t *testing.T) {
	ca, clientCA := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "client-ca")
	sc, cc := net.Pipe()
	defer sc.Close()
	defer cc.Close()
	server := tls.Server(sc, &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "server").TLS(t)},
		ClientCAs:    clientCA.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})
	client := tls.Client(cc, &tls.Config{
		RootCAs:      ca.Pool(),
		ServerName:   "localhost",
		Certificates: []tls.Certificate{clientCA.Client(t, "client").TLS(t)},
	})
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server: %v", err)
	}
	if got := client.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "server" {
		t.Errorf("the server presents %q", got)
	}
	if got := server.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "client" {
		t.Errorf("the client presents %q", got)
	}
}

// The files written hold what crypto/tls and a CA pool read, for their
// owner alone.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	caFile := ca.Write(t, dir, "ca")
	cert, key := ca.Server(t, "server").Write(t, dir, "tls")
	if want := filepath.Join(dir, "ca.crt"); caFile != want {
		t.Errorf("CA file %s, want %s", caFile, want)
	}
	if wantCert, wantKey := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"); cert != wantCert || key != wantKey {
		t.Errorf("files %s, %s; want %s, %s", cert, key, wantCert, wantKey)
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		t.Error(err)
	}
	pemCA, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(pemCA) || !pool.Equal(ca.Pool()) {
		t.Errorf("the CA file does not hold the CA:\n%s", pemCA)
	}
	for _, name := range []string{caFile, cert, key} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, mode)
		}
	}
}
