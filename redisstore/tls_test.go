package redisstore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/redisstore"
)

// writeTLSFiles writes a fresh CA and a server certificate for 127.0.0.1,
// signed by it, into dir, and returns the CA's pool and the file names.
func writeTLSFiles(t *testing.T, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := newKey(), newKey()
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "funnel test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER),
		write("server.key", "EC PRIVATE KEY", keyDER)
}

// A rediss:// URL reaches a real redis-server over TLS, and the store decides
// through it.
func TestTLS(t *testing.T) {
	t.Parallel()
	pool, caFile, certFile, keyFile := writeTLSFiles(t, t.TempDir())
	tlsPort, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	redistest.StartServer(t, "--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
		"--tls-auth-clients", "no")

	opts, err := redisstore.ParseURL("rediss://127.0.0.1:" + strconv.Itoa(tlsPort) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.TLSConfig == nil {
		t.Fatal("rediss:// gave no TLS configuration")
	}
	opts.TLSConfig.RootCAs = pool
	opts.ContextTimeoutEnabled = true
	client := redis.NewUniversalClient(opts)
	defer client.Close()
	store := redisstore.New(client, redisstore.Options{Timeout: 5 * time.Second})
	defer store.Close()

	lim := funnel.New(store)
	ctx := context.Background()
	limit := funnel.PerMinute(30).WithBurst(15)
	for i := 0; i < 16; i++ {
		r, err := lim.Allow(ctx, "tls-user", limit)
		if err != nil || !r.Allowed || r.Fallback {
			t.Fatalf("request %d over TLS: %+v, %v", i, r, err)
		}
	}
	if r, err := lim.Allow(ctx, "tls-user", limit); err != nil || r.Allowed || r.Fallback {
		t.Fatalf("17th request over TLS: %+v, %v; want refused by a decision", r, err)
	}

	// Without the CA the handshake fails: the store falls back (closed).
	opts2, _ := redisstore.ParseURL("rediss://127.0.0.1:" + strconv.Itoa(tlsPort) + "/0")
	opts2.ContextTimeoutEnabled = true
	untrusting := redis.NewUniversalClient(opts2)
	defer untrusting.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	bad := redisstore.New(untrusting, redisstore.Options{Timeout: 2 * time.Second, Logger: quiet})
	defer bad.Close()
	if r, err := funnel.New(bad).Allow(ctx, "tls-user-2", limit); err != nil || !r.Fallback || r.Allowed {
		t.Fatalf("untrusted certificate: %+v, %v; want a fail-closed fallback", r, err)
	}
}
