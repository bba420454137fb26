// Command funnel runs the Funnel rate limiter.
//
//	funnel serve [flags]   serve rate-limit decisions
//	funnel rules check FILE|DIR...   check rules files
//	funnel version         print the version
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // calendar windows in any time zone, on hosts without a zone database
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
