package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/peterbourgon/ff/v3"

	"github.com/funnelrl/funnel/internal/config"
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

// serveConfig reads serve's configuration: the defaults, over them the
// --config file, over that the FUNNEL_* environment variables, and over
// those the flags given on the command line, even those given their
// default value (github.com/peterbourgon/ff/v3 over config.Flags, the one
// declaration of the settings). The error is flag.ErrHelp, errUsage, or why
// the file or an environment variable could not be read.
func serveConfig(args []string, stderr io.Writer) (config.Config, error) {
	cfg := config.Default()
	fs := flag.NewFlagSet("funnel serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := serveFlags(fs, &cfg)
	// The command line first, alone: its errors are usage errors, which the
	// flag package has written already.
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
	err := ff.Parse(fs, args,
		ff.WithEnvVarPrefix(config.EnvPrefix),
		ff.WithConfigFileFlag("config"),
		ff.WithConfigFileParser(func(r io.Reader, set func(name, value string) error) error {
			return config.ParseFile(r, *file, fs, set)
		}))
	switch {
	case err == nil:
		return cfg, nil
	case errors.Is(err, config.ErrInvalid):
		return config.Default(), err
	}
	return config.Default(), fmt.Errorf("config: %w", err)
}

// serveFlags defines serve's flags on fs, each bound to its field of c
// with c's value as its default (config.Flags, the one declaration of the
// settings), and --config. It returns where the --config flag's value goes.
func serveFlags(fs *flag.FlagSet, c *config.Config) *string {
	file := fs.String("config", "", "YAML configuration `file`; flags given on the command line, then FUNNEL_* environment variables, override it")
	config.Flags(fs, c)
	return file
}
