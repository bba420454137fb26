// Package tlsfiles serves TLS from a certificate, a key and an optional
// bundle of client CAs kept in files, and follows the files as they are
// rotated, without a restart and without dropping a connection.
//
// A Watcher loads the files once (New), hands out a *tls.Config for each
// listener (Config) whose handshakes use the files in force, and reloads
// them when they change: as Run notices, or when Reload is called. A new
// set of files that does not load (a broken PEM file, a key that does not
// match the certificate, a bundle with no certificate, a file half
// written) is refused, reported once, and the last good set stays in force.
// Files can change in place, be replaced by a rename, or be swapped
// through the "..data" symbolic link of a Kubernetes Secret volume, as
// cert-manager's rotations are.
//
// With a client CA bundle the listener asks clients for a certificate
// (mutual TLS), by default requiring one that chains to the bundle. A
// session resumed after the bundle changed is checked against the new
// bundle: crypto/tls does not resume it when its certificate no longer
// chains to one of the CAs in force.
//
// Wiring, for each listener:
//
//	w, err := tlsfiles.New(tlsfiles.Options{CertFile: cert, KeyFile: key, ClientCAFile: ca, Logger: log})
//	if err != nil { ... }
//	go w.Run(ctx)
//
//	ln = tls.NewListener(ln, w.Config())           // a plain net.Listener (RESP)
//
//	cfg := w.Config()                              // net/http
//	cfg.NextProtos = []string{"h2", "http/1.1"}
//	srv := &http.Server{Handler: h, TLSConfig: cfg}
//	srv.ServeTLS(ln, "", "")
//
//	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(w.Config())))
//
// One Watcher may serve several listeners: each takes its own Config.
package tlsfiles

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funnelrl/funnel/internal/filewatch"
)

// DefaultPoll is how often Run rereads the files when Options.Poll is 0,
// besides reloading on the file system's events.
const DefaultPoll = time.Minute

// Options configure a Watcher. CertFile and KeyFile are required.
type Options struct {
	// CertFile is a PEM file of the server's certificate, followed by the
	// intermediate certificates of its chain (as tls.crt in a Kubernetes
	// TLS Secret).
	CertFile string
	// KeyFile is the PEM file of the certificate's private key.
	KeyFile string
	// ClientCAFile, when not empty, is a PEM bundle of the CAs whose
	// certificates clients must present (mutual TLS).
	ClientCAFile string
	// OptionalClientCert, with ClientCAFile, lets a client without a
	// certificate in (tls.VerifyClientCertIfGiven); a client that presents
	// one must still present one that the bundle verifies. By default a
	// certificate is required (tls.RequireAndVerifyClientCert).
	OptionalClientCert bool
	// Poll is how often Run rereads the files, besides reloading on the
	// file system's events, for file systems that report no events (some
	// network mounts); 0 means DefaultPoll, a negative value turns polling
	// off. An unchanged set of files costs three small reads and a hash.
	Poll time.Duration
	// Debounce is how long Run waits after the first event of a burst
	// before it reloads, so that files written one after the other are
	// read together; 0 means 100 ms.
	Debounce time.Duration
	// Logger receives a line for each set of files put in force and each
	// refused; nil means slog.Default(). Nothing secret is logged.
	Logger *slog.Logger
	// OnReload, when set, is called after each reload that found the files
	// changed: with nil when the new files are in force, or with the error
	// that refused them (the last good ones stay in force). A refused set
	// is reported once, not at each poll. It is called from Run's
	// goroutine or Reload's caller, must not block for long, and is where
	// reloads are counted.
	OnReload func(error)
}

// Watcher holds the certificate and client CAs in force and reloads them
// from their files. It is safe for concurrent use.
type Watcher struct {
	opts Options
	log  *slog.Logger
	cur  atomic.Pointer[state]

	mu      sync.Mutex        // serializes reloads; guards what follows
	digest  [sha256.Size]byte // of the files last read
	lastErr error             // why they were refused, or nil
}

// state is one set of files, loaded.
type state struct {
	cert tls.Certificate     // with its Leaf
	cas  *x509.CertPool      // nil without ClientCAFile
	ca   []*x509.Certificate // the bundle's certificates, for the log
}

// ErrNoFiles reports Options without a certificate or a key.
var ErrNoFiles = errors.New("tlsfiles: a certificate file and a key file are required")

// New loads the files that opts names. It fails if they do not load; it
// starts no goroutine: Run watches the files.
func New(opts Options) (*Watcher, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, ErrNoFiles
	}
	if opts.Poll == 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	w := &Watcher{opts: opts, log: opts.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	st, digest, err := w.load()
	if err != nil {
		return nil, err
	}
	w.cur.Store(st)
	w.digest = digest
	w.logLoaded(st)
	return w, nil
}

// Config returns a new TLS configuration for a server, whose handshakes
// each use the certificate and client CAs in force at the time: TLS 1.2 at
// least, the certificate of the files, and, with a client CA bundle,
// clients' certificates required (or optional, see
// Options.OptionalClientCert) and verified against it.
//
// Each handshake uses a copy of the returned Config, so fields set on it
// before it is first used, such as NextProtos, carry over; its
// GetConfigForClient, GetCertificate, Certificates, ClientAuth and
// ClientCAs belong to the Watcher and must be left alone. net/http, which
// adds "h2" only to its own copy, needs NextProtos set to serve HTTP/2
// (see the package's documentation); grpc's credentials.NewTLS adds "h2"
// itself.
func (w *Watcher) Config() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	// A Config that is used as it is, without its GetConfigForClient,
	// still serves the certificate in force.
	base.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return &w.cur.Load().cert, nil
	}
	if st := w.cur.Load(); st.cas != nil {
		base.ClientAuth, base.ClientCAs = w.clientAuth(), st.cas
	}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		st := w.cur.Load()
		c := base.Clone()
		c.GetConfigForClient = nil
		c.GetCertificate = nil
		c.Certificates = []tls.Certificate{st.cert}
		c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
		if st.cas != nil {
			c.ClientAuth, c.ClientCAs = w.clientAuth(), st.cas
		}
		return c, nil
	}
	return base
}

// clientAuth is the policy for client certificates when there is a bundle.
func (w *Watcher) clientAuth() tls.ClientAuthType {
	if w.opts.OptionalClientCert {
		return tls.VerifyClientCertIfGiven
	}
	return tls.RequireAndVerifyClientCert
}

// Leaf returns the certificate in force (the first of its chain).
func (w *Watcher) Leaf() *x509.Certificate { return w.cur.Load().cert.Leaf }

// Reload rereads the files now, as Run does on a change, and returns the
// error that refuses them, or nil when they are in force. Files that are
// those last read are not loaded again: the result is then that of their
// last reload, and OnReload is not called.
func (w *Watcher) Reload() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, digest, err := w.load()
	if err != nil {
		// Files read while they were being replaced may not match: read
		// them again, and judge them on what the second read finds when
		// they changed in between.
		if st2, digest2, err2 := w.load(); digest2 != digest {
			st, digest, err = st2, digest2, err2
		}
	}
	if digest == w.digest {
		return w.lastErr
	}
	w.digest, w.lastErr = digest, err
	if err != nil {
		w.log.Error("tls: files refused; the last good certificate stays in force",
			"cert", w.opts.CertFile, "key", w.opts.KeyFile, "client_ca", w.opts.ClientCAFile, "err", err)
	} else {
		w.cur.Store(st)
		w.logLoaded(st)
	}
	if w.opts.OnReload != nil {
		w.opts.OnReload(err)
	}
	return err
}

// logLoaded logs what st holds: names, serial and expiry, never the key.
func (w *Watcher) logLoaded(st *state) {
	leaf := st.cert.Leaf
	attrs := []any{"cert", w.opts.CertFile, "subject", leaf.Subject.String(), "dns", leaf.DNSNames,
		"serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter.UTC()}
	if st.cas != nil {
		attrs = append(attrs, "client_ca", w.opts.ClientCAFile, "client_cas", len(st.ca))
	}
	w.log.Info("tls: certificate in force", attrs...)
}

// load reads the files and returns the state they hold and their digest.
// A file that cannot be read or parsed is an error; the digest then
// covers the error, so that the same failure is reported once.
func (w *Watcher) load() (*state, [sha256.Size]byte, error) {
	names := []string{w.opts.CertFile, w.opts.KeyFile}
	if w.opts.ClientCAFile != "" {
		names = append(names, w.opts.ClientCAFile)
	}
	h := sha256.New()
	datas := make([][]byte, len(names))
	for i, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			err = fmt.Errorf("tlsfiles: %w", err)
			return nil, sha256.Sum256([]byte(err.Error())), err
		}
		fmt.Fprintf(h, "%d\x00", len(data))
		h.Write(data)
		datas[i] = data
	}
	var digest [sha256.Size]byte
	h.Sum(digest[:0])
	st, err := parse(names, datas)
	return st, digest, err
}

// parse builds a state from the files' contents.
func parse(names []string, datas [][]byte) (*state, error) {
	if err := wholePEM(datas[0]); err != nil {
		return nil, fmt.Errorf("tlsfiles: %s: %w", names[0], err)
	}
	cert, err := tls.X509KeyPair(datas[0], datas[1])
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %s and %s: %w", names[0], names[1], err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tlsfiles: %s: %w", names[0], err)
		}
	}
	st := &state{cert: cert}
	if len(names) > 2 {
		if st.ca, err = parseBundle(datas[2]); err != nil {
			return nil, fmt.Errorf("tlsfiles: %s: %w", names[2], err)
		}
		st.cas = x509.NewCertPool()
		for _, c := range st.ca {
			st.cas.AddCert(c)
		}
	}
	return st, nil
}

// parseBundle parses a PEM bundle of CA certificates: every block must be
// a certificate, and there must be one at least.
func parseBundle(data []byte) ([]*x509.Certificate, error) {
	if err := wholePEM(data); err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a %s block where certificates are expected", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	return certs, nil
}

// wholePEM reports an error when data ends with the start of a PEM block
// that is not whole, as a file caught half written does: pem.Decode would
// skip it silently, and a chain or a bundle would lose its last
// certificate. Text after the last block is allowed.
func wholePEM(data []byte) error {
	rest := data
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		rest = r
	}
	if bytes.Contains(rest, []byte("-----")) {
		return errors.New("a PEM block is cut short")
	}
	return nil
}

// Run reloads the files whenever they change, until ctx ends: on the file
// system's events in the directories that hold them (and those their
// symbolic links resolve to), and every Options.Poll. It returns nil when
// ctx ends, or an error at once when it can neither watch the files nor
// poll them. Call it once, in a goroutine of its own.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := filewatch.New(filewatch.Options{Name: "tls", Debounce: w.opts.Debounce, Poll: w.opts.Poll, Logger: w.log})
	if err != nil {
		if w.opts.Poll < 0 {
			fw.Close()
			return fmt.Errorf("tlsfiles: %w", err)
		}
		w.log.Warn("tls: cannot watch the files; polling them only", "every", w.opts.Poll, "err", err)
	}
	files := []string{w.opts.CertFile, w.opts.KeyFile, w.opts.ClientCAFile}
	fw.Set(filewatch.Dirs(files...))
	fw.Run(ctx, func() {
		w.Reload()
		// A file may now resolve elsewhere (a volume's link swapped).
		fw.Set(filewatch.Dirs(files...))
	})
	return nil
}
