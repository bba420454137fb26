// Package daemon wires Funnel's parts into the running server: it is the only
// package that knows them all.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/config"
	"github.com/funnelrl/funnel/internal/connlimit"
	"github.com/funnelrl/funnel/internal/version"
	"github.com/funnelrl/funnel/memstore"
	"github.com/funnelrl/funnel/metrics"
	"github.com/funnelrl/funnel/redisstore"
	"github.com/funnelrl/funnel/respserver"
	"github.com/funnelrl/funnel/rls"
	"github.com/funnelrl/funnel/rules"
)

// Daemon is a Funnel server: a store and the protocol listeners in front of
// it. Build one with New, serve with Run, release with Close.
type Daemon struct {
	cfg     config.Config
	log     *slog.Logger
	store   funnel.Store
	close   func() error // releases the store
	lim     *funnel.Limiter
	metrics *metrics.Metrics

	conns    config.ConnLimits // bounds on connections, timeouts
	slots    *connlimit.Slots  // the process's bound on connections
	sec      security          // credentials and TLS of every listener
	respLn   net.Listener
	respSrv  *respserver.Server
	edges    []edge         // HTTP, gRPC
	watcher  *rules.Watcher // the rules, when a file names them
	rulesXDS *rulesXDS      // the rules, when a control plane sends them
	snap     *snapshots     // the memory store's snapshots, when a file is named
	traces   *traces        // the decisions' spans, when tracing is on
	rls      *rls.Server    // Envoy's rate-limit service, when gRPC is on
	rlsJSON  *rls.Server    // its /json on the HTTP listener (rls, or its own with the console)
	console  *consoleParts  // the console at /ui/, unless turned off
}

// New validates cfg, opens the store, loads the credentials and the TLS
// files, and binds the listeners, so that the addresses are known (and in
// use) before Run. It watches the TLS files, when there are any, until
// Close.
func New(cfg config.Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, log: log, metrics: metrics.New(metrics.Options{})}
	if err := d.openStore(); err != nil {
		return nil, err
	}
	if err := d.openTracing(); err != nil {
		d.close()
		return nil, err
	}
	d.lim = funnel.New(d.store)
	users := map[string]string{}
	if cfg.UsersFile != "" {
		u, err := config.LoadUsers(cfg.UsersFile)
		if err != nil {
			d.close()
			return nil, err
		}
		users = u
	}
	if err := d.openSecurity(users); err != nil {
		d.Close()
		return nil, err
	}
	d.openConns()
	d.openConsole()
	if cfg.RESP != "" {
		if err := d.openRESP(); err != nil {
			d.Close()
			return nil, err
		}
	}
	if err := d.openEdges(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// storeCheckTimeout bounds the check of a Redis store at start.
const storeCheckTimeout = 5 * time.Second

func (d *Daemon) openStore() error {
	switch {
	case d.cfg.Store == "memory":
		maxElapsed := d.cfg.SnapshotMaxElapsed
		if maxElapsed == 0 {
			maxElapsed = -1 // no bound
		}
		s := memstore.New(memstore.Options{MaxKeys: d.cfg.MaxKeys, RestoreMaxElapsed: maxElapsed})
		if err := d.metrics.Evictions(s.Evictions); err != nil {
			s.Close()
			return err
		}
		if d.cfg.Snapshot != "" {
			if err := d.openSnapshots(s); err != nil {
				s.Close()
				return err
			}
		}
		d.store, d.close = s, s.Close
		return nil
	case redisstore.IsURL(d.cfg.Store):
		redisstore.SetGoRedisLogger(d.log) // go-redis logs every failed dial otherwise
		s, err := redisstore.Open(d.cfg.Store, redisstore.Options{
			Prefix:        d.cfg.KeyPrefix,
			Timeout:       d.cfg.StoreTimeout,
			ClockGuard:    d.cfg.RedisClockGuard,
			SortedSetLogs: d.cfg.RedisSortedSetLogs,
			ScriptOnly:    d.cfg.RedisScriptOnly,
			Fail:          d.cfg.Fail(),
			Logger:        d.log,
		})
		if err != nil {
			return fmt.Errorf("daemon: store %s: %w", redact(d.cfg.Store), err)
		}
		// A wrong password, a missing database or a Redis that is not there
		// would make every decision a fallback: refuse to start, and say
		// why, unless the store is to admit while Redis is away.
		ctx, cancel := context.WithTimeout(context.Background(), storeCheckTimeout)
		err = s.Check(ctx)
		cancel()
		if err != nil {
			if !d.cfg.FailOpen {
				s.Close()
				return fmt.Errorf("daemon: store %s: %w (with --fail-open, Funnel starts anyway and admits requests until Redis answers)", redact(d.cfg.Store), err)
			}
			d.log.Warn("the store cannot decide yet; admitting requests (fail-open) until it can", "store", redact(d.cfg.Store), "err", err)
		}
		// A network store's latency and errors are worth watching; the
		// memory store's decisions take nanoseconds, and timing them would
		// cost more than the decisions.
		d.store, d.close = metrics.InstrumentStore(s, d.metrics), s.Close
		if d.cfg.Lease > 0 {
			return d.openLeases(s)
		}
		return nil
	}
	return fmt.Errorf("daemon: unknown store %q", redact(d.cfg.Store))
}

// redact hides the passwords of a store URL: the user's and, in the
// Sentinel forms, the Sentinels' (redisstore.Redact, the one redaction).
func redact(u string) string { return redisstore.Redact(u) }

// Store returns the daemon's store.
func (d *Daemon) Store() funnel.Store { return d.store }

// Run serves until ctx ends or a listener fails, then shuts down
// gracefully: it stops accepting, lets clients finish the commands they
// have sent, flushes their replies and closes their connections, waiting at
// most the configured shutdown timeout.
func (d *Daemon) Run(ctx context.Context) error {
	attrs := []any{"version", version.Version, "store", redact(d.cfg.Store)}
	if d.respLn != nil {
		attrs = append(attrs, "resp", d.respLn.Addr().String())
		d.warnExposed("resp", d.respLn.Addr())
	}
	for _, e := range d.edges {
		attrs = append(attrs, e.name, e.addr().String())
		d.warnExposed(e.name, e.addr())
	}
	attrs = append(attrs, "auth", d.sec.creds.Enabled(), "tls", d.sec.tls != nil, "client_certs", d.cfg.TLS() && d.cfg.TLSCA != "", "max_conns", d.conns.Process)
	d.log.Info("funnel started", attrs...)
	errc := make(chan error, 1+len(d.edges))
	d.snap.start()
	if d.respSrv != nil {
		go func() {
			if err := d.respSrv.Serve(d.respLn); err != nil {
				errc <- fmt.Errorf("daemon: resp server: %w", err)
			}
		}()
	}
	for _, e := range d.edges {
		go func() {
			if err := e.serve(); err != nil {
				errc <- fmt.Errorf("daemon: %s server: %w", e.name, err)
			}
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	timeout := d.cfg.ShutdownTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	d.log.Info("funnel stopping", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make(chan error, 1+len(d.edges))
	go func() {
		if d.respSrv == nil {
			errs <- nil
			return
		}
		errs <- d.respSrv.Shutdown(sctx)
	}()
	for _, e := range d.edges {
		go func() { errs <- e.shutdown(sctx) }()
	}
	var serr error
	for range 1 + len(d.edges) {
		serr = errors.Join(serr, <-errs)
	}
	if serr != nil {
		d.log.Warn("shutdown did not finish in time; connections closed", "err", serr)
	}
	// Every listener is shut down: the snapshot holds the last decision,
	// and the spans still buffered go out within what is left of the
	// shutdown's time.
	err = errors.Join(err, d.snap.final())
	d.traces.shutdown(sctx)
	d.log.Info("funnel stopped")
	return err
}

// Close releases the listeners, stops watching the TLS files and releases
// the store. Call it after Run returns, or instead of Run.
func (d *Daemon) Close() error {
	if d.respSrv != nil {
		d.respSrv.Close()
	}
	if d.respLn != nil {
		d.respLn.Close()
	}
	for _, e := range d.edges {
		e.close()
	}
	if d.watcher != nil {
		d.watcher.Close()
	}
	d.rulesXDS.close()
	d.console.close()
	d.sec.close()
	// After Run, the provider is shut down already and this returns at once;
	// without Run, the spans get a short while.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d.traces.shutdown(ctx)
	return d.close()
}
