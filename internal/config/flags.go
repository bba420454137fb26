package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Flags defines the flags of `funnel serve` on fs, each bound to its field
// of c with c's value as its default, so that defining them leaves c as it
// is. It is the one declaration of the daemon's settings: the flag --x-y
// is the key x_y of the configuration file (Parse) and the environment
// variable FUNNEL_X_Y; the README's table of flags is checked against it.
func Flags(fs *flag.FlagSet, c *Config) {
	fs.StringVar(&c.RESP, "resp", c.RESP, "Redis-protocol listen `address` (empty: off; one listener at least is needed)")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP/JSON API listen `address` (empty: off)")
	fs.StringVar(&c.GRPC, "grpc", c.GRPC, "Envoy rate-limit service (gRPC) listen `address` (empty: off)")
	fs.StringVar(&c.Rules, "rules", c.Rules, "rules `file` or directory (envoyproxy/ratelimit's format), reloaded when it changes")
	fs.BoolVar(&c.RulesMergeDomains, "rules-merge-domains", c.RulesMergeDomains, "let several rules files define one domain")
	fs.StringVar(&c.RulesXDS, "rules-xds", c.RulesXDS, "xDS management server `address` (host:port) that sends the rules (RateLimitConfig resources over ADS), instead of --rules")
	fs.StringVar(&c.RulesXDSNodeID, "rules-xds-node-id", c.RulesXDSNodeID, "xDS node `id` the server picks the rules by (empty: default)")
	fs.StringVar(&c.RulesXDSNodeMetadata, "rules-xds-node-metadata", c.RulesXDSNodeMetadata, "xDS node `metadata`: key=value,key=value")
	fs.StringVar(&c.RulesXDSHeaders, "rules-xds-headers", c.RulesXDSHeaders, "gRPC `headers` sent to the xDS server: name:value,name:value")
	fs.BoolVar(&c.RulesXDSTLS, "rules-xds-tls", c.RulesXDSTLS, "reach the xDS server over TLS (implied by --rules-xds-ca, --rules-xds-cert and --rules-xds-server-name)")
	fs.StringVar(&c.RulesXDSCA, "rules-xds-ca", c.RulesXDSCA, "PEM `file` of the CAs that verify the xDS server (default: the system's)")
	fs.StringVar(&c.RulesXDSCert, "rules-xds-cert", c.RulesXDSCert, "PEM certificate `file` presented to the xDS server (mutual TLS); reloaded when it changes")
	fs.StringVar(&c.RulesXDSKey, "rules-xds-key", c.RulesXDSKey, "PEM private key `file` of --rules-xds-cert")
	fs.StringVar(&c.RulesXDSServerName, "rules-xds-server-name", c.RulesXDSServerName, "`name` the xDS server's certificate must hold, when not the address's host")
	fs.DurationVar(&c.RulesXDSBackoff, "rules-xds-backoff", c.RulesXDSBackoff, "first delay before reconnecting to the xDS server, doubled at each failure, less a random half (0: 10s)")
	fs.DurationVar(&c.RulesXDSBackoffMax, "rules-xds-backoff-max", c.RulesXDSBackoffMax, "bound on the delays before reconnecting to the xDS server (0: 1m)")
	fs.IntVar(&c.RulesXDSMaxMsgSize, "rules-xds-max-msg-size", c.RulesXDSMaxMsgSize, "bound on a response of the xDS server, in `bytes` (0: gRPC's 4 MiB)")
	fs.BoolVar(&c.ShadowMode, "shadow-mode", c.ShadowMode, "the rate-limit service answers OK where it would answer OVER_LIMIT")
	fs.BoolVar(&c.QuotaMode, "quota-mode", c.QuotaMode, "every descriptor is a quota: the rate-limit service refuses a request only when all its descriptors are over")
	fs.BoolVar(&c.ChargeOverLimit, "charge-over-limit", c.ChargeOverLimit, "the rate-limit service charges every hit, the hits over a limit too, into debt, as envoy's service does by default (every rule's charge_over_limit)")
	fs.BoolVar(&c.RLSDynamicMetadata, "rls-dynamic-metadata", c.RLSDynamicMetadata, "the rate-limit service answers with dynamic metadata, the rules' metadata of the descriptors that passed among it")
	fs.BoolVar(&c.RLSHeaders, "rls-headers", c.RLSHeaders, "add rate-limit headers to the rate-limit service's answers (see --rls-header-* and --rls-headers-format)")
	fs.StringVar(&c.RLSHeaderLimit, "rls-header-limit", c.RLSHeaderLimit, "`name` of the header of the limit, with --rls-headers")
	fs.StringVar(&c.RLSHeaderRemaining, "rls-header-remaining", c.RLSHeaderRemaining, "`name` of the header of the requests left, with --rls-headers")
	fs.StringVar(&c.RLSHeaderReset, "rls-header-reset", c.RLSHeaderReset, "`name` of the header of the seconds to the reset, with --rls-headers")
	fs.StringVar(&c.RLSHeadersFormat, "rls-headers-format", c.RLSHeadersFormat, "`format` of --rls-headers: envoy (the three --rls-header-* headers) or ietf (RateLimit-Policy and RateLimit)")
	fs.Float64Var(&c.NearLimitRatio, "near-limit-ratio", c.NearLimitRatio, "share of a limit past which admitted hits count as near the limit in the rate-limit statistics")
	fs.StringVar(&c.Store, "store", c.Store, "`store`: memory, redis://[user:pass@]host:port[/db], rediss://..., redis-cluster://host:port,..., redis-sentinel://[user:pass@]sentinel:port,.../master[/db]")
	fs.IntVar(&c.MaxKeys, "max-keys", c.MaxKeys, "bound on the memory store's keys (0: none)")
	fs.StringVar(&c.Snapshot, "snapshot", c.Snapshot, "snapshot `file` of the memory store: restored at start, written every --snapshot-interval and at shutdown")
	fs.DurationVar(&c.SnapshotInterval, "snapshot-interval", c.SnapshotInterval, "how often the snapshot is written (0: only at shutdown)")
	fs.DurationVar(&c.SnapshotMaxElapsed, "snapshot-max-elapsed", c.SnapshotMaxElapsed, "the most time a restore counts as passed since the snapshot when it cannot prove it on this boot's monotonic clock (0: no bound)")
	fs.BoolVar(&c.SnapshotIgnoreCorrupt, "snapshot-ignore-corrupt", c.SnapshotIgnoreCorrupt, "start empty when the snapshot is bad, after moving it aside to FILE.corrupt-<time> (default: refuse to start)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", c.StoreTimeout, "bound on each Redis store operation (0: 100ms)")
	fs.BoolVar(&c.RedisScriptOnly, "redis-script-only", c.RedisScriptOnly, "decide funnels through the Lua script even when Redis has loaded Funnel's module")
	fs.BoolVar(&c.RedisSortedSetLogs, "redis-sorted-set-logs", c.RedisSortedSetLogs, "keep every sliding log in a Redis sorted set, as versions before packed logs did, while processes of such a version decide the same keys")
	fs.DurationVar(&c.RedisClockGuard, "redis-clock-guard", c.RedisClockGuard, "refuse to follow a step of Redis's clock, or this host's, larger than this: decisions fall back until the clocks agree again or a restart (0: off)")
	fs.BoolVar(&c.FailOpen, "fail-open", c.FailOpen, "admit requests while the store cannot decide (default: refuse them)")
	fs.StringVar(&c.RESPFailClosed, "resp-fail-closed", c.RESPFailClosed, "RESP `reply` to a request refused because the store could not decide: error (-TRYAGAIN) or refuse (the command's refusal, retry after 1s)")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "`prefix` of every key the Redis store writes")
	fs.DurationVar(&c.Lease, "lease", c.Lease, "lease the Redis store's funnels and windows to this process, each lease living `duration` (e.g. 200ms; 0: decide every request in Redis)")
	fs.Int64Var(&c.LeaseMax, "lease-max", c.LeaseMax, "most `units` of one lease (0: the rate's and the burst's bounds only)")
	fs.BoolVar(&c.LeaseShares, "lease-shares", c.LeaseShares, "lease funnels as shares of their rate rather than units (every process sharing the keys must set it)")
	fs.StringVar(&c.TraceEndpoint, "trace-endpoint", c.TraceEndpoint, "send a span of every decision to this OpenTelemetry (OTLP) `collector`: host:port or a URL (default: OTEL_EXPORTER_OTLP_ENDPOINT, or none)")
	fs.StringVar(&c.TraceProtocol, "trace-protocol", c.TraceProtocol, "OTLP `transport`: grpc or http (default: OTEL_EXPORTER_OTLP_PROTOCOL, TRACING_EXPORTER_PROTOCOL, or http)")
	fs.BoolVar(&c.TraceInsecure, "trace-insecure", c.TraceInsecure, "send spans without TLS")
	fs.Float64Var(&c.TraceSampleRate, "trace-sample-rate", c.TraceSampleRate, "share of decisions traced when the caller's trace does not decide, 0 to 1 (0: TRACING_SAMPLING_RATE, or 1)")
	fs.StringVar(&c.TraceServiceName, "trace-service-name", c.TraceServiceName, "service `name` of the spans (default: OTEL_SERVICE_NAME, TRACING_SERVICE_NAME, or funnel)")
	fs.StringVar(&c.RequirePass, "requirepass", c.RequirePass, "`password` of the default user, required on every listener: RESP AUTH, HTTP \"Authorization: Bearer\", gRPC \"authorization\" metadata (better in the config file, which ps does not show)")
	fs.StringVar(&c.UsersFile, "users-file", c.UsersFile, "`file` of users, one \"name password\" per line, for every listener: RESP AUTH name password, HTTP and gRPC Basic")
	fs.BoolVar(&c.NoConsole, "no-console", c.NoConsole, "serve no console at /ui/ on the HTTP listener")
	fs.BoolVar(&c.MetricsOpen, "metrics-open", c.MetricsOpen, "serve /metrics without credentials (/healthz, /readyz, /healthcheck and gRPC health always are)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "PEM certificate `file` (and intermediates): RESP, HTTP and gRPC speak TLS only; reloaded when it changes")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&c.TLSCA, "tls-ca", c.TLSCA, "PEM `file` of client CAs: every listener requires a client certificate signed by one (mutual TLS)")
	fs.IntVar(&c.MaxClients, "max-clients", c.MaxClients, "bound on connected RESP clients (0: half the descriptors the process may open, at most 10000)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "close RESP clients idle this long (0: never)")
	fs.IntVar(&c.MaxConns, "max-conns", c.MaxConns, "bound on the connections of all listeners together (0: the descriptors the process may open, less a tenth)")
	fs.IntVar(&c.HTTPMaxConns, "http-max-conns", c.HTTPMaxConns, "bound on the HTTP listener's connections (0: a quarter of the descriptors the process may open, at most 10000)")
	fs.IntVar(&c.GRPCMaxConns, "grpc-max-conns", c.GRPCMaxConns, "bound on the gRPC listener's connections (0: a quarter of the descriptors the process may open, at most 10000)")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", c.HandshakeTimeout, "bound on a new connection's handshake: TLS on RESP; TLS and HTTP/2 preface on gRPC; TLS and request headers on HTTP (0: 5s)")
	fs.DurationVar(&c.AuthTimeout, "auth-timeout", c.AuthTimeout, "close RESP clients that have not authenticated this long after they connected, when credentials are required (0: 10s)")
	fs.DurationVar(&c.GRPCIdleTimeout, "grpc-idle-timeout", c.GRPCIdleTimeout, "close gRPC connections without a call under way for this long (0: 2m)")
	fs.IntVar(&c.EventLoops, "event-loops", c.EventLoops, "RESP serving: 0 auto (epoll loops on Linux for the memory store), n loops, -1 a goroutine per connection")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on a graceful shutdown")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "`level`: debug, info, warn or error")
}

// Key returns the configuration file's key of the flag named name:
// "fail-open" is "fail_open".
func Key(name string) string { return strings.ReplaceAll(name, "-", "_") }

// EnvPrefix is the prefix of the environment variables of the flags: the
// flag --fail-open is FUNNEL_FAIL_OPEN.
const EnvPrefix = "FUNNEL"

// maxFile bounds a configuration file.
const maxFile = 1 << 20

// Parse reads a YAML configuration from r over base (usually Default()):
// the keys the file sets replace base's. The file is a mapping of keys (the
// flags' names, with '_' for '-') to scalars. Decoding is strict: an unknown
// key, a key given twice, a value that is not a scalar, or a value that its
// flag refuses is an error that names the file (name), the line and the
// key, and leaves base as it is.
func Parse(r io.Reader, name string, base Config) (Config, error) {
	cfg := base
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	Flags(fs, &cfg)
	if err := ParseFile(r, name, fs, fs.Set); err != nil {
		return base, err
	}
	return cfg, nil
}

// ParseFile reads the YAML configuration file name from r, and calls set
// with the flag's name and the value of each key, once it has checked every
// key and value against the flags of fs (defined by Flags): the strict
// decoding that Parse describes. It has the shape of a config file parser
// of github.com/peterbourgon/ff/v3 (less fs and name).
func ParseFile(r io.Reader, name string, fs *flag.FlagSet, set func(name, value string) error) error {
	data, err := io.ReadAll(io.LimitReader(r, maxFile+1))
	if err != nil {
		return fmt.Errorf("config: reading %s: %w", name, err)
	}
	if len(data) > maxFile {
		return fmt.Errorf("%w: %s: larger than 1 MiB", ErrInvalid, name)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file
		}
		return fmt.Errorf("%w: %s: %s", ErrInvalid, name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // a file of comments only
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("%w: %s: line %d: want a mapping of keys to values", ErrInvalid, name, root.Line)
	}
	// Check every key and value on a scratch copy first, so that nothing is
	// set from a file that is refused.
	var scratch Config
	check := flag.NewFlagSet(name, flag.ContinueOnError)
	check.SetOutput(io.Discard)
	Flags(check, &scratch)
	type pair struct{ flag, value string }
	pairs := make([]pair, 0, len(root.Content)/2)
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s: line %d: "+format, append([]any{ErrInvalid, name, k.Line}, a...)...)
		}
		if k.Kind != yaml.ScalarNode {
			return bad("a key must be a string")
		}
		key := k.Value
		f := fs.Lookup(strings.ReplaceAll(key, "_", "-"))
		if f == nil || key != Key(f.Name) || f.Name == "config" {
			return bad("field %s not found", key)
		}
		if line, dup := seen[key]; dup {
			return bad("mapping key %q already defined at line %d", key, line)
		}
		seen[key] = k.Line
		if v.Kind != yaml.ScalarNode {
			return bad("%s: want a value, not a %s", key, kindName(v.Kind))
		}
		value := v.Value
		switch {
		case v.Tag == "!!null":
			value = zeroText(f)
		case zeroText(f) == "false":
			// YAML 1.1's booleans, which the file took before it was read
			// through the flags.
			switch strings.ToLower(value) {
			case "yes", "on":
				value = "true"
			case "no", "off":
				value = "false"
			}
		}
		if err := check.Set(f.Name, value); err != nil {
			return bad("%s: %q is not %s", key, v.Value, typeName(f))
		}
		pairs = append(pairs, pair{f.Name, value})
	}
	for _, p := range pairs {
		if err := set(p.flag, p.value); err != nil {
			return fmt.Errorf("%w: %s: %s: %w", ErrInvalid, name, Key(p.flag), err)
		}
	}
	return nil
}

// kindName names a YAML node kind for an error.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// typeName says what a value of flag f must be, for an error.
func typeName(f *flag.Flag) string {
	switch f.Value.(flag.Getter).Get().(type) {
	case bool:
		return "true or false"
	case int, int64:
		return "an integer"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration (such as 30s or 1m)"
	}
	return "a string"
}

// zeroText is the text of the zero value of flag f's type: what a key
// given no value (null) sets.
func zeroText(f *flag.Flag) string {
	switch f.Value.(flag.Getter).Get().(type) {
	case bool:
		return "false"
	case int, int64, float64:
		return "0"
	case time.Duration:
		return "0s"
	}
	return ""
}
