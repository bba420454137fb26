// Package daemon wires Funnel's parts into the running server: it is the only
// package that knows them all.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/config"
	"github.com/funnelrl/funnel/internal/version"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/resp"
)

// Daemon is a Funnel server: a store and the protocol listeners in front of
// it. Build one with New, serve with Run, release with Close.
type Daemon struct {
	cfg   config.Config
	log   *slog.Logger
	store funnel.Store
	close func() error // releases the store

	respLn  net.Listener
	respSrv *resp.Server
}

// New validates cfg, opens the store and binds the listeners, so that the
// addresses are known (and in use) before Run.
func New(cfg config.Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log}
	if err := d.openStore(); err != nil {
		return nil, err
	}
	users := map[string]string{}
	if cfg.UsersFile != "" {
		u, err := config.LoadUsers(cfg.UsersFile)
		if err != nil {
			d.close()
			return nil, err
		}
		users = u
	}
	ln, err := net.Listen("tcp", cfg.RESP)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("daemon: resp listener: %w", err)
	}
	d.respLn = ln
	d.respSrv = resp.NewServer(d.store, resp.Config{
		Password:    cfg.RequirePass,
		Users:       users,
		MaxClients:  cfg.MaxClients,
		IdleTimeout: cfg.IdleTimeout,
		EventLoops:  cfg.EventLoops,
		Logger:      log,
	})
	return d, nil
}

func (d *Daemon) openStore() error {
	switch {
	case d.cfg.Store == "memory":
		s := memstore.New(memstore.Options{MaxKeys: d.cfg.MaxKeys})
		d.store, d.close = s, s.Close
		return nil
	case strings.HasPrefix(d.cfg.Store, "redis://"), strings.HasPrefix(d.cfg.Store, "rediss://"),
		strings.HasPrefix(d.cfg.Store, "redis-cluster://"), strings.HasPrefix(d.cfg.Store, "rediss-cluster://"):
		redisstore.SetGoRedisLogger(d.log) // go-redis logs every failed dial otherwise
		s, err := redisstore.Open(d.cfg.Store, redisstore.Options{
			Prefix:   d.cfg.KeyPrefix,
			Timeout:  d.cfg.StoreTimeout,
			FailOpen: d.cfg.FailOpen,
			Logger:   d.log,
		})
		if err != nil {
			return fmt.Errorf("daemon: store %s: %w", redact(d.cfg.Store), err)
		}
		d.store, d.close = s, s.Close
		return nil
	}
	return fmt.Errorf("daemon: unknown store %q", redact(d.cfg.Store))
}

// redact hides the password of a store URL.
func redact(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	return u[:scheme+3] + "xxxxx" + u[at:]
}

// RESPAddr returns the address the RESP listener is bound to.
func (d *Daemon) RESPAddr() net.Addr { return d.respLn.Addr() }

// Store returns the daemon's store.
func (d *Daemon) Store() funnel.Store { return d.store }

// Run serves until ctx ends or a listener fails, then shuts down
// gracefully: it stops accepting, lets clients finish the commands they
// have sent, flushes their replies and closes their connections, waiting at
// most the configured shutdown timeout.
func (d *Daemon) Run(ctx context.Context) error {
	d.log.Info("funnel started", "version", version.Version, "store", redact(d.cfg.Store),
		"resp", d.respLn.Addr().String())
	def := config.Default()
	if d.cfg.HTTP != "" && d.cfg.HTTP != def.HTTP {
		d.log.Warn("the HTTP API is not available in this version yet; --http is ignored", "http", d.cfg.HTTP)
	}
	if d.cfg.GRPC != "" && d.cfg.GRPC != def.GRPC {
		d.log.Warn("the Envoy rate-limit service is not available in this version yet; --grpc is ignored", "grpc", d.cfg.GRPC)
	}
	errc := make(chan error, 1)
	go func() { errc <- d.respSrv.Serve(d.respLn) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("daemon: resp server: %w", err)
	}
	timeout := d.cfg.ShutdownTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d.log.Info("funnel stopping", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if serr := d.respSrv.Shutdown(sctx); serr != nil {
		d.log.Warn("shutdown did not finish in time; connections closed", "err", serr)
	}
	d.log.Info("funnel stopped")
	return err
}

// Close releases the listeners and the store. Call it after Run returns,
// or instead of Run.
func (d *Daemon) Close() error {
	d.respSrv.Close()
	d.respLn.Close()
	return d.close()
}
