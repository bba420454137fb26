// Package config is the configuration of `funnel serve`: its types, its
// defaults, its one declaration as flags (Flags), from which the YAML
// file's keys (Parse, strict) and the environment variables are derived,
// and validation.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/funnelrl/funnel"
	"github.com/funnelrl/funnel/redisstore"
)

// Fail returns the fail mode that FailOpen chooses, for the store and
// every edge.
func (c *Config) Fail() funnel.FailMode {
	if c.FailOpen {
		return funnel.FailOpen
	}
	return funnel.FailClosed
}

// Config is the configuration of the daemon. Flags declares its settings,
// once: each is a flag, a key of the YAML file (Parse) and an environment
// variable. Every setting is optional.
type Config struct {
	// RESP is the Redis-protocol listen address; empty turns it off. At
	// least one of RESP, HTTP and GRPC is needed.
	RESP string
	// HTTP is the HTTP/JSON listen address.
	HTTP string
	// GRPC is the Envoy rate-limit service listen address.
	GRPC string
	// Store is "memory" or a Redis URL (redis://, rediss://,
	// redis-cluster://, rediss-cluster://, redis-sentinel://,
	// rediss-sentinel://; see redisstore.ParseURL).
	Store string
	// MaxKeys bounds the memory store's keys; 0 means no bound.
	MaxKeys int
	// Snapshot names the file that the memory store is restored from at
	// start, before any listener accepts a connection, and written to
	// every SnapshotInterval and at a graceful shutdown, after the last
	// decision. Empty means no snapshots: a restart forgets every limit.
	Snapshot string
	// SnapshotInterval is how often the snapshot is written; 0 means only
	// at a graceful shutdown.
	SnapshotInterval time.Duration
	// SnapshotIgnoreCorrupt starts the daemon empty when the snapshot is
	// bad (truncated, corrupt, not a snapshot, of a newer version), after
	// moving it aside to FILE.corrupt-<time>; by default the daemon does
	// not start.
	SnapshotIgnoreCorrupt bool
	// SnapshotMaxElapsed bounds the time a restore counts as passed since
	// the snapshot was written when it cannot prove it on the monotonic
	// clock of the boot that wrote it (after a reboot, on another
	// machine): a wall clock stepped forward would otherwise refill every
	// key. 0 means no bound.
	SnapshotMaxElapsed time.Duration
	// StoreTimeout bounds each operation of the Redis store; 0 means 100 ms.
	StoreTimeout time.Duration
	// RedisClockGuard, when positive, makes the Redis store refuse to
	// follow a step of Redis's clock (or this host's) larger than it
	// (redisstore.Options.ClockGuard): decisions fall back until the clocks
	// agree again or the process restarts. 0: off.
	RedisClockGuard time.Duration
	// RedisSortedSetLogs keeps every sliding log of the Redis store in a
	// sorted set, as versions before packed logs did
	// (redisstore.Options.SortedSetLogs), while processes of such a version
	// decide the same keys.
	RedisSortedSetLogs bool
	// RedisScriptOnly decides funnels through the Redis store's Lua script
	// even when Redis has loaded Funnel's module
	// (redisstore.Options.ScriptOnly).
	RedisScriptOnly bool
	// FailOpen makes every edge, and the Redis store, admit requests while
	// the store cannot decide (funnel.FailOpen); by default they are
	// refused (funnel.FailClosed). See Fail.
	FailOpen bool
	// RESPFailClosed is how the RESP server answers a request refused
	// because the store could not decide (fail-closed): "error" (the
	// default) answers -TRYAGAIN, which no client can mistake for a
	// decision; "refuse" answers the command's refusal with a retry after
	// of one second, for clients that need its integers.
	RESPFailClosed string
	// Lease, when positive, makes the Redis store's funnels leased (see
	// package leasestore): decisions spend blocks of units leased from
	// Redis, from memory, and each lease lives at most Lease. 0 decides
	// every request in Redis.
	Lease time.Duration
	// LeaseMax caps the units of one lease; 0 means no cap but the rate's
	// and the burst's.
	LeaseMax int64
	// LeaseShares leases funnels as rate shares rather than units (see
	// leasestore.Options.Shares): Redis calls on a key bounded by the
	// fleet and the lifetime below, near and over the limit. Every process
	// deciding those keys must have it set.
	LeaseShares bool
	// TraceEndpoint, when set, sends a span of every decision to this
	// OpenTelemetry (OTLP) collector: host:port, or a URL. Empty leaves
	// tracing to the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and to envoyproxy/ratelimit's
	// TRACING_ENABLED; without any of them nothing is traced.
	TraceEndpoint string
	// TraceProtocol is the OTLP transport: "grpc" or "http" (protobuf over
	// HTTP). Empty means OTEL_EXPORTER_OTLP_PROTOCOL, else
	// TRACING_EXPORTER_PROTOCOL, else "http".
	TraceProtocol string
	// TraceInsecure sends spans without TLS.
	TraceInsecure bool
	// TraceSampleRate is the share of decisions traced, from 0 to 1, when
	// the caller's trace does not decide (a sampled parent is followed);
	// 0 means TRACING_SAMPLING_RATE, else 1.
	TraceSampleRate float64
	// TraceServiceName names the service in the spans' resource; empty
	// means OTEL_SERVICE_NAME, else TRACING_SERVICE_NAME, else "funnel".
	TraceServiceName string
	// KeyPrefix is prepended to every key the Redis store writes.
	KeyPrefix string
	// RequirePass is the password of the "default" user; empty means no
	// authentication unless UsersFile names users. The same credentials
	// guard every listener: RESP clients give them with AUTH (or HELLO ...
	// AUTH), HTTP clients in an Authorization header (Bearer <password>
	// for the default user, Basic for any user), gRPC clients in the
	// "authorization" metadata of each call, as over HTTP.
	RequirePass string
	// UsersFile names a file of users, one "name password" per line ('#'
	// starts a comment), who authenticate as RequirePass says.
	UsersFile string
	// MetricsOpen serves /metrics without credentials. /healthz and
	// /readyz are always served without them, as is gRPC's health service.
	MetricsOpen bool
	// NoConsole turns off the console at /ui/ on the HTTP listener (see
	// package internal/console), which is on by default, behind the same
	// credentials as the rest of the HTTP API.
	NoConsole bool
	// TLSCert is a PEM file of the server's certificate, followed by its
	// intermediates; with TLSKey, every listener (RESP, HTTP, gRPC) speaks
	// TLS only. The files are reloaded when they change.
	TLSCert string
	// TLSKey is the PEM file of TLSCert's private key.
	TLSKey string
	// TLSCA, when set, is a PEM bundle of CAs: every listener then requires
	// clients to present a certificate that one of them signed (mutual
	// TLS). It needs TLSCert and TLSKey.
	TLSCA string
	// MaxClients bounds the RESP server's connected clients; 0 means a
	// half of the descriptors the process may open, at most 10000 (see
	// ConnLimits).
	MaxClients int
	// IdleTimeout disconnects idle RESP clients; 0 means never.
	IdleTimeout time.Duration
	// MaxConns bounds the connections of all listeners together (RESP,
	// HTTP, gRPC); 0 means the descriptors the process may open
	// (RLIMIT_NOFILE) less a tenth, at least 64, kept for the store, the
	// snapshots and the files.
	MaxConns int
	// HTTPMaxConns bounds the HTTP listener's connections; 0 means a
	// quarter of the descriptors the process may open, at most 10000.
	HTTPMaxConns int
	// GRPCMaxConns bounds the gRPC listener's connections; 0 means a
	// quarter of the descriptors the process may open, at most 10000.
	GRPCMaxConns int
	// HandshakeTimeout bounds the handshake of a new connection: TLS on
	// RESP; TLS and the HTTP/2 preface and settings on gRPC; TLS and each
	// request's headers on HTTP; 0 means 5 seconds.
	HandshakeTimeout time.Duration
	// AuthTimeout disconnects a RESP client that has not authenticated
	// that long after it connected, when credentials are required; 0
	// means 10 seconds.
	AuthTimeout time.Duration
	// GRPCIdleTimeout closes a gRPC connection that has had no call under
	// way for that long (HTTP/2 GOAWAY); 0 means 2 minutes, as HTTP's idle
	// connections.
	GRPCIdleTimeout time.Duration
	// EventLoops is how the RESP server serves connections: 0 picks epoll
	// event loops (one per two CPUs) on Linux when the store never blocks
	// (the memory store) and a goroutine per connection otherwise; a
	// positive number asks for that many event loops; a negative number
	// means a goroutine per connection.
	EventLoops int
	// ShutdownTimeout bounds a graceful shutdown; 0 means 10 seconds.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Rules names a rules file, or a directory of them, in envoyproxy/
	// ratelimit's format (see package rules), for Envoy's rate-limit
	// service; they are reloaded when they change. Empty means no rules:
	// every descriptor is allowed.
	Rules string
	// RulesMergeDomains lets several rules files define one domain (envoy's
	// MERGE_DOMAIN_CONFIG).
	RulesMergeDomains bool
	// RulesXDS is the management server's address (host:port): the rules
	// are those it sends, instead of a file's (CONFIG_GRPC_XDS_SERVER_URL
	// with CONFIG_TYPE=GRPC_XDS_SOTW). Empty means no xDS.
	RulesXDS string
	// RulesXDSNodeID is the node id the server picks a snapshot by; empty
	// means "default" (CONFIG_GRPC_XDS_NODE_ID).
	RulesXDSNodeID string
	// RulesXDSNodeMetadata is the node's metadata, "key=value,key=value"
	// (CONFIG_GRPC_XDS_NODE_METADATA).
	RulesXDSNodeMetadata string
	// RulesXDSHeaders are gRPC metadata sent on the stream,
	// "name:value,name:value" (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	RulesXDSHeaders string
	// RulesXDSTLS reaches the server over TLS, verified against the
	// system's CAs unless RulesXDSCA names others
	// (CONFIG_GRPC_XDS_SERVER_USE_TLS). RulesXDSCA, RulesXDSCert and
	// RulesXDSServerName imply it.
	RulesXDSTLS bool
	// RulesXDSCA is a PEM bundle of the CAs that verify the server
	// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT).
	RulesXDSCA string
	// RulesXDSCert is the PEM file of the certificate the client presents
	// to a server that asks for one (CONFIG_GRPC_XDS_CLIENT_TLS_CERT); it
	// is reloaded when it changes.
	RulesXDSCert string
	// RulesXDSKey is the PEM file of RulesXDSCert's private key
	// (CONFIG_GRPC_XDS_CLIENT_TLS_KEY).
	RulesXDSKey string
	// RulesXDSServerName is the name the server's certificate must hold,
	// when it is not the address's host (CONFIG_GRPC_XDS_SERVER_TLS_SAN).
	RulesXDSServerName string
	// RulesXDSBackoff is the first delay before reconnecting to the
	// server; 0 means 10s (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL). Each
	// failure doubles it, up to RulesXDSBackoffMax, less a random half.
	RulesXDSBackoff time.Duration
	// RulesXDSBackoffMax bounds the delays; 0 means a minute
	// (XDS_CLIENT_BACKOFF_MAX_INTERVAL).
	RulesXDSBackoffMax time.Duration
	// RulesXDSMaxMsgSize bounds a response of the server, in bytes; 0
	// means gRPC's 4 MiB (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES).
	RulesXDSMaxMsgSize int
	// ShadowMode makes Envoy's rate-limit service answer OK where it would
	// answer OVER_LIMIT (envoy's SHADOW_MODE); descriptor statuses still
	// tell.
	ShadowMode bool
	// QuotaMode puts every descriptor of Envoy's rate-limit service in
	// quota mode (envoy's QUOTA_MODE): a request is refused only when all
	// of its descriptors are over their limits.
	QuotaMode bool
	// ChargeOverLimit makes Envoy's rate-limit service charge every hit of
	// every rule, the hits that overflow too, into debt (a rule's
	// charge_over_limit): envoy's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
	// false, its default.
	ChargeOverLimit bool
	// RLSDynamicMetadata makes the rate-limit service answer with dynamic
	// metadata, the rules' metadata among it (envoy's
	// RESPONSE_DYNAMIC_METADATA).
	RLSDynamicMetadata bool
	// RLSHeaders adds rate-limit headers to the rate-limit service's
	// answers, as envoy's LIMIT_RESPONSE_HEADERS_ENABLED: those named by
	// RLSHeaderLimit, RLSHeaderRemaining and RLSHeaderReset, or the ones
	// RLSHeadersFormat names.
	RLSHeaders bool
	// RLSHeaderLimit names the header of the limit (envoy's
	// LIMIT_LIMIT_HEADER); RateLimit-Limit by default.
	RLSHeaderLimit string
	// RLSHeaderRemaining names the header of the requests left (envoy's
	// LIMIT_REMAINING_HEADER); RateLimit-Remaining by default.
	RLSHeaderRemaining string
	// RLSHeaderReset names the header of the seconds to the reset (envoy's
	// LIMIT_RESET_HEADER); RateLimit-Reset by default.
	RLSHeaderReset string
	// RLSHeadersFormat is "envoy" (the three headers named above) or
	// "ietf" (the RateLimit-Policy and RateLimit fields of the IETF
	// draft); "" means envoy.
	RLSHeadersFormat string
	// NearLimitRatio is the share of a limit past which admitted hits
	// count as near the limit in the rate-limit service's statistics
	// (envoy's NEAR_LIMIT_RATIO); 0 means 0.8.
	NearLimitRatio float64
}

// Default returns the configuration of a plain `funnel serve`.
func Default() Config {
	return Config{
		RESP:               "127.0.0.1:6380",
		HTTP:               "127.0.0.1:8080",
		GRPC:               "127.0.0.1:8081",
		Store:              "memory",
		SnapshotInterval:   30 * time.Second,
		SnapshotMaxElapsed: 10 * time.Minute,
		RESPFailClosed:     "error",
		ShutdownTimeout:    10 * time.Second,
		LogLevel:           "info",

		RLSHeaderLimit:     "RateLimit-Limit",
		RLSHeaderRemaining: "RateLimit-Remaining",
		RLSHeaderReset:     "RateLimit-Reset",
		RLSHeadersFormat:   "envoy",
		NearLimitRatio:     0.8,
	}
}

// ErrInvalid is wrapped by every validation and parsing error.
var ErrInvalid = errors.New("config: invalid")

// Load reads the configuration file at path over base.
func Load(path string, base Config) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return base, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return Parse(f, path, base)
}

// Validate reports whether c can be served.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case c.RESP == "" && c.HTTP == "" && c.GRPC == "":
		return bad("resp, http and grpc are all off: at least one listener is needed")
	case c.Store == "":
		return bad("store: memory or a Redis URL is required")
	case c.Store != "memory" && !redisstore.IsURL(c.Store):
		return bad("store %q: want memory, %s://...", c.Store, strings.Join(redisstore.Schemes(), "://..., "))
	case c.MaxKeys < 0:
		return bad("max_keys %d is negative", c.MaxKeys)
	case c.StoreTimeout < 0:
		return bad("store_timeout %v is negative", c.StoreTimeout)
	case c.RedisClockGuard < 0:
		return bad("redis_clock_guard %v is negative", c.RedisClockGuard)
	case c.MaxClients < 0:
		return bad("max_clients %d is negative", c.MaxClients)
	case c.IdleTimeout < 0:
		return bad("idle_timeout %v is negative", c.IdleTimeout)
	case c.ShutdownTimeout < 0:
		return bad("shutdown_timeout %v is negative", c.ShutdownTimeout)
	case c.RESPFailClosed != "" && c.RESPFailClosed != "error" && c.RESPFailClosed != "refuse":
		return bad("resp_fail_closed %q: want error or refuse", c.RESPFailClosed)
	case c.Rules != "" && c.GRPC == "":
		return bad("rules %q: the rules serve Envoy's rate-limit service, which an empty grpc address turns off", c.Rules)
	case c.TLSCert != "" && c.TLSKey == "":
		return bad("tls_cert %q without tls_key: TLS needs the certificate's private key too", c.TLSCert)
	case c.TLSKey != "" && c.TLSCert == "":
		return bad("tls_key %q without tls_cert: TLS needs the certificate too", c.TLSKey)
	case c.TLSCA != "" && c.TLSCert == "":
		return bad("tls_ca %q without tls_cert and tls_key: client certificates are asked for over TLS, which needs the server's certificate and key", c.TLSCA)
	}
	if _, err := c.Level(); err != nil {
		return err
	}
	if err := c.validateConns(); err != nil {
		return err
	}
	if err := c.validateSnapshot(); err != nil {
		return err
	}
	if err := c.validateLease(); err != nil {
		return err
	}
	if err := c.validateTrace(); err != nil {
		return err
	}
	if err := c.validateXDS(); err != nil {
		return err
	}
	return c.validateRLS()
}

// validateRLS checks the rate-limit service's header names (which may be
// empty only when RLSHeaders is off) and format, and its near-limit ratio.
func (c Config) validateRLS() error {
	for _, h := range [...]struct{ field, name string }{
		{"rls_header_limit", c.RLSHeaderLimit},
		{"rls_header_remaining", c.RLSHeaderRemaining},
		{"rls_header_reset", c.RLSHeaderReset},
	} {
		if !isToken(h.name) && (c.RLSHeaders || h.name != "") {
			return fmt.Errorf("%w: %s %q: want a header name (letters, digits and !#$%%&'*+-.^_`|~)", ErrInvalid, h.field, h.name)
		}
	}
	switch {
	case c.RLSHeadersFormat != "" && c.RLSHeadersFormat != "envoy" && c.RLSHeadersFormat != "ietf":
		return fmt.Errorf("%w: rls_headers_format %q: want envoy or ietf", ErrInvalid, c.RLSHeadersFormat)
	case !(c.NearLimitRatio >= 0 && c.NearLimitRatio <= 1): // NaN too
		return fmt.Errorf("%w: near_limit_ratio %v: want a number from 0 to 1", ErrInvalid, c.NearLimitRatio)
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2), as
// a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// TLS reports whether the listeners speak TLS.
func (c Config) TLS() bool { return c.TLSCert != "" }

// Level returns the slog level named by LogLevel.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return 0, fmt.Errorf("%w: log_level %q: want debug, info, warn or error", ErrInvalid, c.LogLevel)
	}
	return l, nil
}

// ParseUsers reads a users file: one "name password" per line, blank lines
// and lines starting with '#' ignored. A name may appear once.
func ParseUsers(r io.Reader, name string) (map[string]string, error) {
	users := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: %s:%d: want \"name password\"", ErrInvalid, name, n)
		}
		if _, dup := users[f[0]]; dup {
			return nil, fmt.Errorf("%w: %s:%d: user %q appears twice", ErrInvalid, name, n, f[0])
		}
		users[f[0]] = f[1]
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("config: reading %s: %w", name, err)
	}
	return users, nil
}

// LoadUsers reads the users file at path.
func LoadUsers(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	return ParseUsers(f, path)
}
