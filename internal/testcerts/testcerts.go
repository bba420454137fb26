// Package testcerts makes certificates for tests: a certificate authority,
// server certificates for localhost and 127.0.0.1, and client
// certificates, each with its key in PEM, and the files that hold them.
//
// Every certificate is valid from an hour ago for a day, with a P-256
// ECDSA key; serial numbers are unique within the test binary. A failure
// to make or write one fails the test at once.
package testcerts

import (
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
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// serial numbers the certificates apart across the tests of a binary.
var serial atomic.Int64

// CA is a certificate authority made for a test.
type CA struct {
	// Cert is the authority's own certificate.
	Cert *x509.Certificate
	// PEM is Cert in PEM, as a CA file holds it.
	PEM []byte

	key *ecdsa.PrivateKey
}

// Pair is a certificate and its private key (PKCS #8), both in PEM.
type Pair struct {
	// Cert is the certificate in PEM.
	Cert []byte
	// Key is the private key in PEM.
	Key []byte
}

// NewCA returns a new self-signed certificate authority whose common name
// is name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: encode("CERTIFICATE", der), key: key}
}

// Pool returns a certificate pool that holds the CA alone.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

// Server returns a server certificate named cn, signed by the CA, for the
// host name localhost and the address 127.0.0.1.
func (c *CA) Server(t testing.TB, cn string) Pair {
	t.Helper()
	tmpl := template(cn)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	return c.issue(t, tmpl)
}

// Client returns a client certificate named cn, signed by the CA.
func (c *CA) Client(t testing.TB, cn string) Pair {
	t.Helper()
	tmpl := template(cn)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return c.issue(t, tmpl)
}

// Write writes the CA's certificate into dir as name.crt and returns the
// file's path.
func (c *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	writeFile(t, path, c.PEM)
	return path
}

// TLS returns p as a certificate of crypto/tls, for a server's or a
// client's configuration.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Write writes p into dir as name.crt and name.key, readable by their
// owner alone, and returns their paths.
func (p Pair) Write(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, cert, p.Cert)
	writeFile(t, key, p.Key)
	return cert, key
}

// issue signs tmpl with the CA for a new key.
func (c *CA) issue(t testing.TB, tmpl *x509.Certificate) Pair {
	t.Helper()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{Cert: encode("CERTIFICATE", der), Key: encode("PRIVATE KEY", k)}
}

// template returns what every certificate has: a common name, a serial
// number of its own, and its validity.
func template(cn string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
