// Package daemon wires Funnel's parts into the running server: it is the only
// package that knows them all.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/internal/version"
	"github.com/funnelrl/funnel/memstore"
)

// Config is the daemon's configuration.
type Config struct {
	// RESP is the address of the Redis-protocol listener.
	RESP string
	// HTTP is the address of the HTTP/JSON listener.
	HTTP string
	// GRPC is the address of the Envoy rate-limit service listener.
	GRPC string
	// Store is "memory" or a Redis URL.
	Store string
	// MaxKeys bounds the memory store's keys; zero means no bound.
	MaxKeys int
}

// DefaultConfig returns the configuration of a plain `funnel serve`.
func DefaultConfig() Config {
	return Config{
		RESP:  "127.0.0.1:6380",
		HTTP:  "127.0.0.1:8080",
		GRPC:  "127.0.0.1:8081",
		Store: "memory",
	}
}

// ErrNotAvailable is returned for a configured feature this build does not
// serve yet.
var ErrNotAvailable = errors.New("daemon: not available yet")

// Validate reports whether c can be served.
func (c Config) Validate() error {
	switch {
	case c.Store == "memory":
	case strings.HasPrefix(c.Store, "redis://"), strings.HasPrefix(c.Store, "rediss://"),
		strings.HasPrefix(c.Store, "redis-cluster://"):
		return fmt.Errorf("%w: the Redis store (--store %s); use --store memory", ErrNotAvailable, c.Store)
	default:
		return fmt.Errorf("daemon: unknown store %q: want memory, redis://, rediss:// or redis-cluster://", c.Store)
	}
	if c.MaxKeys < 0 {
		return fmt.Errorf("daemon: max keys %d is negative", c.MaxKeys)
	}
	return nil
}

// Daemon is a running Funnel server.
type Daemon struct {
	cfg   Config
	log   *slog.Logger
	store *memstore.Store
	// Limiter is the limiter over the configured store.
	Limiter *funnel.Limiter
}

// New builds a daemon from cfg; Run serves it.
func New(cfg Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := memstore.New(memstore.Options{MaxKeys: cfg.MaxKeys})
	return &Daemon{cfg: cfg, log: log, store: store, Limiter: funnel.New(store)}, nil
}

// Run serves until ctx ends, then shuts down and returns nil.
func (d *Daemon) Run(ctx context.Context) error {
	d.log.Info("funnel started", "version", version.Version, "store", d.cfg.Store)
	d.log.Warn("network listeners are not available in this build yet; the library API is",
		"resp", d.cfg.RESP, "http", d.cfg.HTTP, "grpc", d.cfg.GRPC)
	<-ctx.Done()
	d.log.Info("funnel stopping")
	return nil
}

// Close releases the daemon's resources.
func (d *Daemon) Close() error { return d.store.Close() }
