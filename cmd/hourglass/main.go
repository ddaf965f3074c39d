// Command hourglass is the one binary for people: `hourglass serve` runs the
// whole system locally; further subcommands serve operators (package cli
// holds them all).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hourglass/hourglass/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
