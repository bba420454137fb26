package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ClientConfig returns a new TLS configuration for a client that presents
// the certificate in force, to a server that asks for one (mutual TLS):
// each handshake takes the certificate of the files as they are then, so
// that a client keeps its connections across rotations as a server does.
// The caller sets RootCAs and ServerName, which the Watcher leaves alone.
func (w *Watcher) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &w.cur.Load().cert, nil
		},
	}
}

// LoadCAs reads a PEM bundle of CA certificates, as a client trusts them
// to verify a server: every block must be a whole certificate, and there
// must be one at least.
func LoadCAs(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %w", err)
	}
	certs, err := parseBundle(data)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
