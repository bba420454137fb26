package redisstore_test

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/redistest"
	"github.com/funnelrl/funnel/internal/testcerts"
	"github.com/funnelrl/funnel/redisstore"
)

// writeTLSFiles writes a fresh CA and a server certificate for 127.0.0.1,
// signed by it, into dir, and returns the CA's pool and the file names.
func writeTLSFiles(t *testing.T, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	ca := testcerts.NewCA(t, "funnel test CA")
	certFile, keyFile = ca.Server(t, "127.0.0.1").Write(t, dir, "server")
	return ca.Pool(), ca.Write(t, dir, "ca"), certFile, keyFile
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
