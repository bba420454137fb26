package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/funnelrl/funnel/internal/auth"
	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/tlsfiles"
)

// What guards the listeners: one set of credentials (requirepass and the
// users file) and one set of TLS files, for RESP, HTTP and gRPC alike.
//
//   - RESP: AUTH or HELLO ... AUTH with the credentials; over TLS, a
//     goroutine per connection (the event loops serve plain TCP only).
//   - HTTP: an Authorization header (Bearer or Basic) on every path but
//     /healthz and /readyz, and /metrics with metrics_open; TLS with
//     HTTP/2.
//   - gRPC: "authorization" metadata on every call but those of the
//     health service; TLS.
//
// With tls_ca, each listener requires a client certificate signed by one
// of its CAs, before any credentials are read.

// security holds what guards the listeners.
type security struct {
	creds *auth.Credentials
	tls   *tlsfiles.Watcher // nil without TLS
	stop  context.CancelFunc
	done  chan struct{} // closed when the watcher has stopped
}

// openSecurity builds the credentials of cfg with its users, and loads the
// TLS files, when cfg names them, and watches them until close.
func (d *Daemon) openSecurity(users map[string]string) error {
	d.sec.creds = auth.New(d.cfg.RequirePass, users)
	if !d.cfg.TLS() {
		return nil
	}
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: d.metrics.Namespace(),
		Name:      "tls_reloads_total",
		Help:      "Loads of the TLS certificate, key and client CA files, by result (success, failure: the last good files stay in force).",
	}, []string{"result"})
	w, err := tlsfiles.New(tlsfiles.Options{
		CertFile:     d.cfg.TLSCert,
		KeyFile:      d.cfg.TLSKey,
		ClientCAFile: d.cfg.TLSCA,
		Logger:       d.log,
		OnReload: func(err error) {
			if err != nil {
				reloads.WithLabelValues("failure").Inc()
			} else {
				reloads.WithLabelValues("success").Inc()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("daemon: tls: %w", err)
	}
	reloads.WithLabelValues("success").Inc()
	reloads.WithLabelValues("failure")
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: d.metrics.Namespace(),
		Name:      "tls_certificate_expiry_timestamp_seconds",
		Help:      "Unix time at which the TLS certificate in force expires.",
	}, func() float64 { return float64(w.Leaf().NotAfter.Unix()) })
	for _, c := range []prometheus.Collector{reloads, expiry} {
		if err := d.metrics.Registry().Register(c); err != nil {
			return err
		}
	}
	d.sec.tls = w
	ctx, stop := context.WithCancel(context.Background())
	d.sec.stop, d.sec.done = stop, make(chan struct{})
	go func() {
		defer close(d.sec.done)
		if err := w.Run(ctx); err != nil {
			d.log.Error("the TLS files are not watched; they are reloaded only by a restart", "err", err)
		}
	}()
	return nil
}

// close stops the watcher of the TLS files, and waits for it.
func (s *security) close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
}

// tlsConfig returns the TLS configuration of a listener, or nil without
// TLS.
func (s *security) tlsConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.Config()
}

// ReloadTLS rereads the TLS files now, as the daemon does by itself when
// they change, and returns the error that refuses them (the last good
// files then stay in force). It returns nil when the listeners do not
// speak TLS.
func (d *Daemon) ReloadTLS() error {
	if d.sec.tls == nil {
		return nil
	}
	return d.sec.tls.Reload()
}

// warnExposed logs what makes a listener bound beyond loopback unsafe:
// no credentials, or credentials that travel in clear text.
func (d *Daemon) warnExposed(name string, addr net.Addr) {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return
	}
	switch {
	case !d.sec.creds.Enabled():
		d.log.Warn("a listener beyond loopback takes no credentials: whoever reaches it can decide, reset keys and lift bans (set requirepass or users_file)", "listener", name, "addr", addr.String())
	case d.sec.tls == nil:
		d.log.Warn("a listener beyond loopback takes credentials without TLS: they travel in clear text (set tls_cert and tls_key)", "listener", name, "addr", addr.String())
	}
}

// httpExempt returns the paths that HTTP serves without credentials.
func httpExempt(cfg config.Config) []string {
	paths := append([]string(nil), auth.HealthPaths...)
	if cfg.GRPC != "" {
		paths = append(paths, "/healthcheck") // the rate-limit service's, on the HTTP listener
	}
	if cfg.MetricsOpen {
		paths = append(paths, "/metrics")
	}
	return paths
}
