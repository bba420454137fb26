package config

import (
	"fmt"
	"time"
)

// Defaults of the connections' timeouts (see Config.HandshakeTimeout and
// the others).
const (
	DefaultHandshakeTimeout = 5 * time.Second
	DefaultAuthTimeout      = 10 * time.Second
	DefaultGRPCIdleTimeout  = 2 * time.Minute
)

// maxPerListener is the most connections a listener's default bound allows:
// Redis's maxclients.
const maxPerListener = 10000

// ConnLimits are the bounds on connections and the timeouts in force: the
// Config's, or their defaults.
type ConnLimits struct {
	// Process bounds every listener's connections together.
	Process int
	// RESP, HTTP and GRPC bound each listener's.
	RESP, HTTP, GRPC int
	// Handshake, Auth and GRPCIdle are HandshakeTimeout, AuthTimeout and
	// GRPCIdleTimeout.
	Handshake, Auth, GRPCIdle time.Duration
}

// ConnLimits returns the bounds in force for a process that may open nofile
// descriptors (RLIMIT_NOFILE). The defaults leave a tenth of them, at least
// 64, to the process (the store's connections, snapshots, files), and
// share the rest: a half for RESP, a quarter each for HTTP and gRPC, at
// most 10000 each; so that one listener full of idle connections leaves the
// others their places, and the process its descriptors.
func (c Config) ConnLimits(nofile uint64) ConnLimits {
	const most = 1 << 30 // RLIM_INFINITY, and anything close
	nofile = min(nofile, most)
	keep := max(nofile/10, 64)
	budget := 16 // a process allowed almost nothing still serves a few
	if nofile > keep+16 {
		budget = int(nofile - keep)
	}
	share := func(set, part int) int {
		if set > 0 {
			return set
		}
		return max(min(budget/part, maxPerListener), 1)
	}
	orDefault := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	l := ConnLimits{
		Process:   c.MaxConns,
		RESP:      share(c.MaxClients, 2),
		HTTP:      share(c.HTTPMaxConns, 4),
		GRPC:      share(c.GRPCMaxConns, 4),
		Handshake: orDefault(c.HandshakeTimeout, DefaultHandshakeTimeout),
		Auth:      orDefault(c.AuthTimeout, DefaultAuthTimeout),
		GRPCIdle:  orDefault(c.GRPCIdleTimeout, DefaultGRPCIdleTimeout),
	}
	if l.Process <= 0 {
		l.Process = budget
	}
	return l
}

// validateConns checks that no bound on connections, nor their timeouts, is
// negative.
func (c Config) validateConns() error {
	for _, f := range [...]struct {
		name string
		n    int
	}{{"max_conns", c.MaxConns}, {"http_max_conns", c.HTTPMaxConns}, {"grpc_max_conns", c.GRPCMaxConns}} {
		if f.n < 0 {
			return fmt.Errorf("%w: %s %d is negative", ErrInvalid, f.name, f.n)
		}
	}
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{{"handshake_timeout", c.HandshakeTimeout}, {"auth_timeout", c.AuthTimeout}, {"grpc_idle_timeout", c.GRPCIdleTimeout}} {
		if f.d < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalid, f.name, f.d)
		}
	}
	return nil
}
