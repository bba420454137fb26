package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funnelrl/funnel/internal/testcerts"
)

// serve runs a TLS server on 127.0.0.1:0 with cfg: it answers each
// connection with the name of the client's certificate ("-" without one)
// and closes it.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, cfg)
	var wg sync.WaitGroup
	t.Cleanup(func() { tln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.Handshake(); err != nil {
					return
				}
				name := "-"
				if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
					name = certs[0].Subject.CommonName
				}
				io.WriteString(tc, name)
			})
		}
	})
	return ln.Addr().String()
}

// client is how a test client dials.
type client struct {
	roots *x509.CertPool
	cert  *tls.Certificate // nil: no certificate
	cache tls.ClientSessionCache
	max   uint16 // the highest TLS version; 0 means TLS 1.3
}

// dial connects to addr, reads the server's answer to the end, and returns
// the name of the server's certificate, the answer (the name of the
// client's certificate as the server saw it) and whether the session was
// resumed. With TLS 1.3, a refused client certificate shows when reading.
func (c client) dial(addr string) (server, answer string, resumed bool, err error) {
	cfg := &tls.Config{RootCAs: c.roots, ServerName: "localhost", ClientSessionCache: c.cache, MaxVersion: c.max}
	if c.cert != nil {
		// Sent whatever CAs the server names: a crypto/tls client
		// otherwise keeps a certificate that they do not issue to itself.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.cert, nil }
	}
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return "", "", false, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(conn)
	st := conn.ConnectionState()
	if err != nil {
		return "", "", false, err
	}
	return st.PeerCertificates[0].Subject.CommonName, string(b), st.DidResume, nil
}

// mustServe checks that the server presents the certificate named want.
func mustServe(t *testing.T, c client, addr, want string) {
	t.Helper()
	got, _, _, err := c.dial(addr)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if got != want {
		t.Fatalf("the server presents %q, want %q", got, want)
	}
}

// reloads records OnReload's calls.
type reloads struct {
	mu   sync.Mutex
	errs []error
	ch   chan error
}

func newReloads() *reloads { return &reloads{ch: make(chan error, 100)} }

func (r *reloads) on(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
	r.ch <- err
}

func (r *reloads) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newMutualTLS writes the files of a certificate named server-1, signed by
// ca, and of clientCA, the CA of client certificates, and returns a
// Watcher of them, the files and both CAs.
func newMutualTLS(t *testing.T) (w *Watcher, f files, ca, clientCA *testcerts.CA) {
	t.Helper()
	ca, clientCA = testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "client-ca")
	f = newFiles(t)
	f.write(t, ca.Server(t, "server-1"), clientCA.PEM)
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return w, f, ca, clientCA
}

func TestRotateInPlace(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t)
	f.write(t, ca.Server(t, "server-1"), nil)
	rl := newReloads()
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, Logger: quiet(), OnReload: rl.on})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, w.Config())
	c := client{roots: ca.Pool()}
	mustServe(t, c, addr, "server-1")

	// Unchanged files: nothing is reloaded.
	if err := w.Reload(); err != nil || rl.count() != 0 {
		t.Fatalf("Reload of unchanged files: %v, %d reloads", err, rl.count())
	}
	f.write(t, ca.Server(t, "server-2"), nil)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	mustServe(t, c, addr, "server-2")
	if w.Leaf().Subject.CommonName != "server-2" {
		t.Errorf("Leaf is %q", w.Leaf().Subject.CommonName)
	}
	if rl.count() != 1 || rl.errs[0] != nil {
		t.Errorf("OnReload calls: %v", rl.errs)
	}
}

// A Secret volume's ..data swap replaces the certificate, the key and the
// client CAs at once.
func TestRotateSecretVolume(t *testing.T) {
	t.Parallel()
	serverCA, oldCA, newCA_ := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "client-ca-1"), testcerts.NewCA(t, "client-ca-2")
	v := newSecretVolume(t)
	v.update(t, serverCA.Server(t, "server-1"), oldCA.PEM)
	f := v.files()
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, w.Config())
	oldClient := oldCA.Client(t, "client-1").TLS(t)
	newClient := newCA_.Client(t, "client-2").TLS(t)
	mustServe(t, client{roots: serverCA.Pool(), cert: &oldClient}, addr, "server-1")

	v.update(t, serverCA.Server(t, "server-2"), newCA_.PEM)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	_, answer, _, err := client{roots: serverCA.Pool(), cert: &newClient}.dial(addr)
	if err != nil || answer != "client-2" {
		t.Fatalf("a client of the new CA: %q, %v", answer, err)
	}
	mustServe(t, client{roots: serverCA.Pool(), cert: &newClient}, addr, "server-2")
	if _, _, _, err := (client{roots: serverCA.Pool(), cert: &oldClient}).dial(addr); err == nil {
		t.Fatal("a client of the CA rotated out was let in")
	}
}

func TestBrokenFilesKeepTheLastGood(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t)
	one, two := ca.Server(t, "server-1"), ca.Server(t, "server-2")
	f.write(t, one, ca.PEM)
	rl := newReloads()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, Logger: log, OnReload: rl.on})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, w.Config())
	c := client{roots: ca.Pool()}

	// Each broken set is refused, reported once however often it is
	// reread, and the last good certificate is still served.
	broken := []struct {
		name  string
		apply func()
	}{
		{"garbage certificate", func() { writeFile(t, f.cert, []byte("not a certificate")) }},
		{"certificate cut short", func() { f.write(t, two, nil); writeFile(t, f.cert, two.Cert[:len(two.Cert)/2]) }},
		{"chain cut short", func() {
			f.write(t, two, nil)
			writeFile(t, f.cert, append(append([]byte{}, two.Cert...), ca.PEM[:40]...))
		}},
		{"mismatched key", func() { f.write(t, testcerts.Pair{Cert: two.Cert, Key: one.Key}, nil) }},
		{"empty key", func() { f.write(t, testcerts.Pair{Cert: two.Cert, Key: nil}, nil) }},
		{"missing key", func() {
			if err := os.Remove(f.key); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, b := range broken {
		b.apply()
		for range 3 {
			if err := w.Reload(); err == nil {
				t.Fatalf("%s: Reload accepted it", b.name)
			}
		}
		if rl.count() != i+1 {
			t.Fatalf("%s: %d reports after %d broken sets, want one each", b.name, rl.count(), i+1)
		}
		if err := <-rl.ch; err == nil {
			t.Fatalf("%s: OnReload(nil)", b.name)
		}
		mustServe(t, c, addr, "server-1")
	}
	f.write(t, two, nil)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	mustServe(t, c, addr, "server-2")
	if err := <-rl.ch; err != nil {
		t.Fatalf("OnReload(%v) for good files", err)
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") || strings.Contains(logs.String(), "BEGIN") {
		t.Errorf("the log holds PEM data:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "files refused"); n != len(broken) {
		t.Errorf("%d refusals logged, want %d:\n%s", n, len(broken), logs.String())
	}
}

func TestClientCAFileBroken(t *testing.T) {
	t.Parallel()
	w, f, ca, clientCA := newMutualTLS(t)
	addr := serve(t, w.Config())
	cert := clientCA.Client(t, "client").TLS(t)
	c := client{roots: ca.Pool(), cert: &cert}
	for _, bad := range [][]byte{nil, []byte("# no certificate\n"), clientCA.PEM[:50], ca.Server(t, "x").Key} {
		writeFile(t, f.ca, bad)
		if err := w.Reload(); err == nil {
			t.Fatalf("a CA file of %q was accepted", bad)
		}
		if _, answer, _, err := c.dial(addr); err != nil || answer != "client" {
			t.Fatalf("the last good CAs are not in force: %q, %v", answer, err)
		}
	}
}

func TestNewFails(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t)
	one, two := ca.Server(t, "server-1"), ca.Server(t, "server-2")
	f.write(t, testcerts.Pair{Cert: one.Cert, Key: two.Key}, []byte("nothing"))
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no files", Options{}},
		{"no key", Options{CertFile: f.cert}},
		{"missing file", Options{CertFile: f.cert + ".missing", KeyFile: f.key}},
		{"mismatched key", Options{CertFile: f.cert, KeyFile: f.key}},
	} {
		if _, err := New(tc.opts); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	f.write(t, one, []byte("nothing"))
	if _, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca}); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
	if _, err := New(Options{}); !errors.Is(err, ErrNoFiles) {
		t.Errorf("New(Options{}) = %v", err)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	serverCA, clientCA, otherCA := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "client-ca"), testcerts.NewCA(t, "other-ca")
	f := newFiles(t)
	f.write(t, serverCA.Server(t, "server"), clientCA.PEM)
	good := clientCA.Client(t, "client").TLS(t)
	foreign := otherCA.Client(t, "intruder").TLS(t)
	serverOnly := clientCA.Server(t, "not-a-client").TLS(t) // no client auth usage
	roots := serverCA.Pool()

	for _, optional := range []bool{false, true} {
		w, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, OptionalClientCert: optional, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		addr := serve(t, w.Config())
		for _, tc := range []struct {
			name   string
			cert   *tls.Certificate
			max    uint16
			answer string // "" when refused
		}{
			{"the CA's client", &good, 0, "client"},
			{"the CA's client over TLS 1.2", &good, tls.VersionTLS12, "client"},
			{"another CA's client", &foreign, 0, ""},
			{"another CA's client over TLS 1.2", &foreign, tls.VersionTLS12, ""},
			{"a server certificate", &serverOnly, 0, ""},
			{"no certificate", nil, 0, map[bool]string{false: "", true: "-"}[optional]},
		} {
			_, answer, _, err := client{roots: roots, cert: tc.cert, max: tc.max}.dial(addr)
			switch {
			case tc.answer == "" && err == nil:
				t.Errorf("optional=%v, %s: let in as %q", optional, tc.name, answer)
			case tc.answer != "" && (err != nil || answer != tc.answer):
				t.Errorf("optional=%v, %s: %q, %v; want %q", optional, tc.name, answer, err, tc.answer)
			}
		}
	}
}

// A session resumed after the client CAs rotated is checked against the
// new ones: a client whose CA was rotated out cannot come back on a
// session ticket.
func TestResumptionAfterCARotation(t *testing.T) {
	t.Parallel()
	serverCA, oldCA, newCA_ := testcerts.NewCA(t, "server-ca"), testcerts.NewCA(t, "client-ca-1"), testcerts.NewCA(t, "client-ca-2")
	f := newFiles(t)
	f.write(t, serverCA.Server(t, "server"), oldCA.PEM)
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, w.Config())
	cert := oldCA.Client(t, "client").TLS(t)
	c := client{roots: serverCA.Pool(), cert: &cert, cache: tls.NewLRUClientSessionCache(4)}
	if _, _, resumed, err := c.dial(addr); err != nil || resumed {
		t.Fatalf("first dial: resumed %v, %v", resumed, err)
	}
	if _, _, resumed, err := c.dial(addr); err != nil || !resumed {
		t.Fatalf("second dial: resumed %v, %v; the test needs resumption to work", resumed, err)
	}
	writeFile(t, f.ca, newCA_.PEM)
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, answer, resumed, err := c.dial(addr); err == nil {
		t.Fatalf("a client of the CA rotated out came back (resumed %v) as %q", resumed, answer)
	}
}

func TestMinVersion(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t)
	f.write(t, ca.Server(t, "server"), nil)
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := w.Config()
	cfg.MinVersion = tls.VersionTLS10 // lowered by mistake: still 1.2
	addr := serve(t, cfg)
	if _, _, _, err := (client{roots: ca.Pool(), max: tls.VersionTLS11}).dial(addr); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	mustServe(t, client{roots: ca.Pool(), max: tls.VersionTLS12}, addr, "server")
}

// Run reloads on the file system's events: a Secret volume's swap is
// served without a call to Reload.
func TestRunWatchesSecretVolume(t *testing.T) {
	t.Parallel()
	ca, clientCA := testcerts.NewCA(t, "ca"), testcerts.NewCA(t, "client-ca")
	v := newSecretVolume(t)
	v.update(t, ca.Server(t, "server-1"), clientCA.PEM)
	f := v.files()
	rl := newReloads()
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca, Poll: -1, Debounce: time.Millisecond, Logger: quiet(), OnReload: rl.on})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addr := serve(t, w.Config())
	cert := clientCA.Client(t, "client").TLS(t)
	c := client{roots: ca.Pool(), cert: &cert}
	mustServe(t, c, addr, "server-1")

	for _, name := range []string{"server-2", "server-3"} {
		deadline := time.After(10 * time.Second)
		v.update(t, ca.Server(t, name), clientCA.PEM)
		for w.Leaf().Subject.CommonName != name {
			select {
			case err := <-rl.ch:
				if err != nil {
					// Files read across a swap may not match; the
					// next event reloads them.
					t.Logf("OnReload(%v)", err)
				}
			case <-time.After(500 * time.Millisecond):
				// Run may not have been watching yet: update again.
				v.update(t, ca.Server(t, name), clientCA.PEM)
			case <-deadline:
				t.Fatalf("no reload of %s after 10 s", name)
			}
		}
		mustServe(t, c, addr, name)
	}
}

// Run reloads files edited in place, and polls when asked to.
func TestRunPollsAndWatchesInPlace(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ca")
	f := newFiles(t)
	f.write(t, ca.Server(t, "server-1"), nil)
	rl := newReloads()
	w, err := New(Options{CertFile: f.cert, KeyFile: f.key, Poll: 20 * time.Millisecond, Logger: quiet(), OnReload: rl.on})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	addr := serve(t, w.Config())
	two := ca.Server(t, "server-2")
	f.write(t, two, nil)
	select {
	case <-rl.ch:
		// A half-written pair may have been refused on the way.
		for w.Leaf().Subject.CommonName != "server-2" {
			select {
			case <-rl.ch:
			case <-time.After(10 * time.Second):
				t.Fatal("server-2 not in force after 10 s")
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload after 10 s")
	}
	mustServe(t, client{roots: ca.Pool()}, addr, "server-2")
}
