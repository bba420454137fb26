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
	def := config.Default()
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f config.Config
	configFile := fs.String("config", "", "YAML configuration `file`; flags given on the command line override it")
	fs.StringVar(&f.RESP, "resp", def.RESP, "Redis-protocol listen `address`")
	fs.StringVar(&f.HTTP, "http", def.HTTP, "HTTP/JSON API listen `address` (empty: off)")
	fs.StringVar(&f.GRPC, "grpc", def.GRPC, "Envoy rate-limit service (gRPC) listen `address` (empty: off)")
	fs.StringVar(&f.Rules, "rules", def.Rules, "rules `file` or directory (envoyproxy/ratelimit's format), reloaded when it changes")
	fs.BoolVar(&f.RulesMergeDomains, "rules-merge-domains", def.RulesMergeDomains, "let several rules files define one domain")
	fs.BoolVar(&f.ShadowMode, "shadow-mode", def.ShadowMode, "the rate-limit service answers OK where it would answer OVER_LIMIT")
	fs.BoolVar(&f.RLSHeaders, "rls-headers", def.RLSHeaders, "add envoy's X-RateLimit-* headers to the rate-limit service's answers")
	fs.StringVar(&f.Store, "store", def.Store, "`store`: memory, redis://[user:pass@]host:port[/db], rediss://..., redis-cluster://host:port,...")
	fs.IntVar(&f.MaxKeys, "max-keys", def.MaxKeys, "bound on the memory store's keys (0: none)")
	fs.DurationVar(&f.StoreTimeout, "store-timeout", def.StoreTimeout, "bound on each Redis store operation (0: 100ms)")
	fs.BoolVar(&f.FailOpen, "fail-open", def.FailOpen, "admit requests while Redis cannot be reached (default: refuse them)")
	fs.StringVar(&f.RESPFailClosed, "resp-fail-closed", def.RESPFailClosed, "RESP `reply` to a request refused because the store could not decide: error (-TRYAGAIN) or refuse (the command's refusal, retry after 1s)")
	fs.StringVar(&f.KeyPrefix, "key-prefix", def.KeyPrefix, "`prefix` of every key the Redis store writes")
	fs.StringVar(&f.RequirePass, "requirepass", def.RequirePass, "`password` of the default user, required on every listener: RESP AUTH, HTTP \"Authorization: Bearer\", gRPC \"authorization\" metadata (better in the config file, which ps does not show)")
	fs.StringVar(&f.UsersFile, "users-file", def.UsersFile, "`file` of users, one \"name password\" per line, for every listener: RESP AUTH name password, HTTP and gRPC Basic")
	fs.BoolVar(&f.MetricsOpen, "metrics-open", def.MetricsOpen, "serve /metrics without credentials (/healthz, /readyz and gRPC health always are)")
	fs.StringVar(&f.TLSCert, "tls-cert", def.TLSCert, "PEM certificate `file` (and intermediates): RESP, HTTP and gRPC speak TLS only; reloaded when it changes")
	fs.StringVar(&f.TLSKey, "tls-key", def.TLSKey, "PEM private key `file` of --tls-cert")
	fs.StringVar(&f.TLSCA, "tls-ca", def.TLSCA, "PEM `file` of client CAs: every listener requires a client certificate signed by one (mutual TLS)")
	fs.IntVar(&f.MaxClients, "max-clients", def.MaxClients, "bound on connected RESP clients (0: 10000)")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", def.IdleTimeout, "close RESP clients idle this long (0: never)")
	fs.IntVar(&f.EventLoops, "event-loops", def.EventLoops, "RESP serving: 0 auto (epoll loops on Linux for the memory store), n loops, -1 a goroutine per connection")
	fs.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "bound on a graceful shutdown")
	fs.StringVar(&f.LogLevel, "log-level", def.LogLevel, "`level`: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "funnel serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg := def
	if *configFile != "" {
		var err error
		if cfg, err = config.Load(*configFile, def); err != nil {
			fmt.Fprintln(stderr, "funnel serve:", err)
			return 1
		}
	}
	fs.Visit(func(fl *flag.Flag) { override(&cfg, f, fl.Name) })
	if err := cfg.Validate(); err != nil {
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

// override copies the field of flag name from the flags f into cfg.
func override(cfg *config.Config, f config.Config, name string) {
	switch name {
	case "resp":
		cfg.RESP = f.RESP
	case "http":
		cfg.HTTP = f.HTTP
	case "grpc":
		cfg.GRPC = f.GRPC
	case "rules":
		cfg.Rules = f.Rules
	case "rules-merge-domains":
		cfg.RulesMergeDomains = f.RulesMergeDomains
	case "shadow-mode":
		cfg.ShadowMode = f.ShadowMode
	case "rls-headers":
		cfg.RLSHeaders = f.RLSHeaders
	case "store":
		cfg.Store = f.Store
	case "max-keys":
		cfg.MaxKeys = f.MaxKeys
	case "store-timeout":
		cfg.StoreTimeout = f.StoreTimeout
	case "fail-open":
		cfg.FailOpen = f.FailOpen
	case "resp-fail-closed":
		cfg.RESPFailClosed = f.RESPFailClosed
	case "key-prefix":
		cfg.KeyPrefix = f.KeyPrefix
	case "requirepass":
		cfg.RequirePass = f.RequirePass
	case "users-file":
		cfg.UsersFile = f.UsersFile
	case "metrics-open":
		cfg.MetricsOpen = f.MetricsOpen
	case "tls-cert":
		cfg.TLSCert = f.TLSCert
	case "tls-key":
		cfg.TLSKey = f.TLSKey
	case "tls-ca":
		cfg.TLSCA = f.TLSCA
	case "max-clients":
		cfg.MaxClients = f.MaxClients
	case "idle-timeout":
		cfg.IdleTimeout = f.IdleTimeout
	case "event-loops":
		cfg.EventLoops = f.EventLoops
	case "shutdown-timeout":
		cfg.ShutdownTimeout = f.ShutdownTimeout
	case "log-level":
		cfg.LogLevel = f.LogLevel
	}
}
