// Command hourglass is the one binary for people: `hourglass serve` runs the
// whole system locally; further subcommands serve operators.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/localstack"
)

func main() {
	if err := root().Execute(); err != nil {
		os.Exit(1)
	}
}

func root() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "hourglass",
		Short:         "Delayed withdrawals and flash sales on Redis",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	cmd.AddCommand(serveCmd(), reconcileCmd())
	return cmd
}

func serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the whole system locally (HTTP API, poller, consumer)",
		Long: `Run the whole system locally: the HTTP API on HOURGLASS_ADDR (default
127.0.0.1:8080), the poller loop and the consumer fed by an in-process
stand-in for SQS. Without REDIS_URL it runs on an embedded Redis whose data
is gone when it stops. Settings come from the environment (see README).
SIGINT or SIGTERM stops it cleanly after finishing the work it has claimed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Local)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := localstack.Serve(ctx, cfg, cmd.OutOrStdout(), nil); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
}
