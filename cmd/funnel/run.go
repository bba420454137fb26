package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

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
		return serve(ctx, args[1:], stdout, stderr)
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

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := daemon.DefaultConfig()
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.RESP, "resp", cfg.RESP, "Redis-protocol listen `address`")
	fs.StringVar(&cfg.HTTP, "http", cfg.HTTP, "HTTP/JSON listen `address`")
	fs.StringVar(&cfg.GRPC, "grpc", cfg.GRPC, "Envoy rate-limit service (gRPC) listen `address`")
	fs.StringVar(&cfg.Store, "store", cfg.Store, "`store`: memory, redis://[user:pass@]host:port[/db], rediss://..., redis-cluster://host:port,...")
	fs.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "bound on the memory store's keys (0: no bound)")
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
	log := slog.New(slog.NewTextHandler(stdout, nil))
	d, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "funnel serve:", err)
		return 1
	}
	defer d.Close()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(stderr, "funnel serve:", err)
		return 1
	}
	return 0
}
