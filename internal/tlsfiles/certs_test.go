package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// serial numbers certificates apart across the tests.
var serial atomic.Int64

// ca is a certificate authority made for a test.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// pair is a certificate and its key, in PEM.
type pair struct{ cert, key []byte }

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newCA(t *testing.T, name string) *ca {
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
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// pool returns a pool of the CA alone.
func (c *ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// issue returns a certificate named cn for a server (localhost and
// 127.0.0.1) or for a client.
func (c *ca) issue(t *testing.T, cn string, client bool) pair {
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

// tlsCert returns p as a client certificate.
func (p pair) tlsCert(t *testing.T) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.cert, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// files are the paths a Watcher reads, in a temporary directory.
type files struct{ dir, cert, key, ca string }

func newFiles(t *testing.T) files {
	dir := t.TempDir()
	return files{dir: dir, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key"), ca: filepath.Join(dir, "ca.crt")}
}

// write writes the files in place (the same inodes, truncated and
// rewritten); a nil ca leaves the CA file alone.
func (f files) write(t *testing.T, p pair, ca []byte) {
	t.Helper()
	writeFile(t, f.cert, p.cert)
	writeFile(t, f.key, p.key)
	if ca != nil {
		writeFile(t, f.ca, ca)
	}
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// secretVolume lays files out as the kubelet does in a Secret volume:
// each file is a symbolic link through ..data, a link to a directory
// named after the time of the update, which an update replaces whole.
type secretVolume struct {
	dir     string
	version int
}

func newSecretVolume(t *testing.T) *secretVolume { return &secretVolume{dir: t.TempDir()} }

// files returns the paths a Watcher reads from the volume.
func (v *secretVolume) files() files {
	return files{dir: v.dir, cert: filepath.Join(v.dir, "tls.crt"), key: filepath.Join(v.dir, "tls.key"), ca: filepath.Join(v.dir, "ca.crt")}
}

// update makes the volume hold p and ca as the kubelet's atomic writer
// does: a new timestamped directory, a ..data_tmp link to it renamed over
// ..data, the old directory removed.
func (v *secretVolume) update(t *testing.T, p pair, ca []byte) {
	t.Helper()
	v.version++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_11_25_08_00_%02d.%d", v.version, 1000+v.version))
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ts, "tls.crt"), p.cert)
	writeFile(t, filepath.Join(ts, "tls.key"), p.key)
	writeFile(t, filepath.Join(ts, "ca.crt"), ca)
	old, _ := os.Readlink(filepath.Join(v.dir, "..data"))
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(v.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
