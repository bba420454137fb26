package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/funnelrl/funnel/config"
	"github.com/funnelrl/funnel/internal/daemon"
	"github.com/funnelrl/funnel/internal/version"
)

const usage = `Usage:
  funnel serve [flags]   serve rate-limit decisions
  funnel rules check FILE|DIR...
                         check rules files, starting nothing
  funnel version         print the version

Run 'funnel serve -h' for the flags of serve.
`

// run is the whole command, with its arguments and streams given, so that
// tests run it in process. It returns the exit code: 0 ok, 1 failure, 2 usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr, nil)
	case "rules":
		return rulesCmd(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "funnel", version.Version)
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "funnel: unknown command %q\n%s", args[0], usage)
	return 2
}

// serve runs `funnel serve`. ready, when not nil, receives the daemon once
// it listens (for tests).
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(*daemon.Daemon)) int {
	cfg, err := serveConfig(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	case err == nil:
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "funnel serve:", err)
		return 1
	}
	level, _ := cfg.Level()
	log := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: level}))
	d, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "funnel serve:", err)
		return 1
	}
	defer d.Close()
	if ready != nil {
		ready(d)
	}
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "funnel serve:", err)
		return 1
	}
	return 0
}

// errUsage reports arguments that serve does not take; the message is
// already written.
var errUsage = errors.New("funnel serve: usage")

// serveConfig reads serve's configuration from its arguments: the defaults,
// over them the --config file, and over that the flags given on the command
// line, even those given their default value. The arguments are parsed
// twice: first to find the file (and to answer --help with the defaults),
// then with every flag bound to its field of the loaded configuration, so
// that a flag not given leaves the file's value in place. The error is
// flag.ErrHelp, errUsage, or why the file could not be read.
func serveConfig(args []string, stderr io.Writer) (config.Config, error) {
	cfg := config.Default()
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := serveFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "funnel serve: unexpected argument %q\n", fs.Arg(0))
		return cfg, errUsage
	}
	if *file == "" {
		return cfg, nil
	}
	cfg, err := config.Load(*file, config.Default())
	if err != nil {
		return cfg, err
	}
	fs = flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	serveFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil { // parsed once already: cannot fail
		return cfg, errUsage
	}
	return cfg, nil
}

// serveFlags defines serve's flags on fs, each bound to its field of c with
// c's value as its default, so that defining them leaves c as it is. It
// returns where the --config flag's value goes.
func serveFlags(fs *flag.FlagSet, c *config.Config) *string {
	file := fs.String("config", "", "YAML configuration `file`; flags given on the command line override it")
	fs.StringVar(&c.RESP, "resp", c.RESP, "Redis-protocol listen `address` (empty: off; one listener at least is needed)")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP/JSON API listen `address` (empty: off)")
	fs.StringVar(&c.GRPC, "grpc", c.GRPC, "Envoy rate-limit service (gRPC) listen `address` (empty: off)")
	fs.StringVar(&c.Rules, "rules", c.Rules, "rules `file` or directory (envoyproxy/ratelimit's format), reloaded when it changes")
	fs.BoolVar(&c.RulesMergeDomains, "rules-merge-domains", c.RulesMergeDomains, "let several rules files define one domain")
	xdsFlags(fs, c)
	fs.BoolVar(&c.ShadowMode, "shadow-mode", c.ShadowMode, "the rate-limit service answers OK where it would answer OVER_LIMIT")
	fs.BoolVar(&c.QuotaMode, "quota-mode", c.QuotaMode, "every descriptor is a quota: the rate-limit service refuses a request only when all its descriptors are over")
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
	fs.BoolVar(&c.FailOpen, "fail-open", c.FailOpen, "admit requests while the store cannot decide (default: refuse them)")
	fs.StringVar(&c.RESPFailClosed, "resp-fail-closed", c.RESPFailClosed, "RESP `reply` to a request refused because the store could not decide: error (-TRYAGAIN) or refuse (the command's refusal, retry after 1s)")
	fs.StringVar(&c.KeyPrefix, "key-prefix", c.KeyPrefix, "`prefix` of every key the Redis store writes")
	fs.DurationVar(&c.Lease, "lease", c.Lease, "lease the Redis store's funnels and windows to this process, each lease living `duration` (e.g. 200ms; 0: decide every request in Redis)")
	fs.Int64Var(&c.LeaseMax, "lease-max", c.LeaseMax, "most `units` of one lease (0: the rate's and the burst's bounds only)")
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
	connFlags(fs, c)
	fs.IntVar(&c.EventLoops, "event-loops", c.EventLoops, "RESP serving: 0 auto (epoll loops on Linux for the memory store), n loops, -1 a goroutine per connection")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "bound on a graceful shutdown")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "`level`: debug, info, warn or error")
	return file
}
