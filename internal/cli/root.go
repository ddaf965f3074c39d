// Package cli is the hourglass command tree: `hourglass serve` runs the
// whole system locally; further subcommands serve operators. cmd/hourglass
// runs it on a terminal, the operator function runs its operator commands
// in the stack's network.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/localstack"
)

// Exit codes scripts can rely on.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed (Redis unreachable, ids not found, ...)
	exitUsage   = 2 // the command line or the environment is wrong; nothing was done
)

// Run executes the command line args (without the program name) and
// returns the exit code: 0 success, 1 the command failed, 2 usage. With a
// leading --remote <ApiUrl>, or HOURGLASS_REMOTE set, an operator command
// runs in the deployed stack's operator function instead.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	target, rest, err := remoteTarget(args, os.Getenv(remoteEnv))
	if err == nil && target != "" {
		var r *remote
		if r, err = newRemote(ctx, target); err == nil {
			return r.run(ctx, rest, stdout, stderr)
		}
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "hourglass:", err)
		return exitUsage
	}
	return run(ctx, rest, stdin, stdout, stderr)
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := root()
	cmd.SetArgs(args)
	cmd.SetIn(stdin)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	ran, err := cmd.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	// A failed write to stderr has nowhere left to be told; the exit
	// status still says the command failed.
	_, _ = fmt.Fprintln(stderr, "hourglass:", err)
	var u usageError
	if errors.As(err, &u) {
		_, _ = fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ran.CommandPath())
		return exitUsage
	}
	return exitFailure
}

func root() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hourglass",
		Short: "Delayed withdrawals and flash sales on Redis",
		Long: `hourglass runs Hourglass locally (serve) and operates a running one: its
queues (stats, peek, dead), its flash sales (preheat), its ledger (reconcile) and
the payouts only an operator can settle (payouts); smoke proves a deployed stack
end to end (docs/deploy.md#smoke-test).

The operator commands talk to Redis directly: they read REDIS_URL (required),
HOURGLASS_REDIS_PREFIX, HOURGLASS_QUEUE_SHARDS and the ledger settings
(HOURGLASS_LEDGER, DYNAMODB_ENDPOINT, the table names) from the environment,
as serve and the Lambda functions do. In AWS, where Redis is inside the VPC,
an operator command (payouts unresolved|resolve, reconcile, stats, dead, peek)
runs in the stack's operator function instead: put --remote <ApiUrl> first
(or set HOURGLASS_REMOTE=<ApiUrl>); the call is signed with your AWS
credentials (SigV4) and must come from one of the stack's operator roles.
See docs/operations.md#running-operator-commands-in-aws.

Exit status:
  0  success
  1  the command ran and failed (Redis unreachable, a named job not found, ...)
  2  usage error: a bad flag, argument or setting; nothing was done

Long commands show progress on standard error when it is a terminal, and stay
quiet when it is not. --json prints machine-readable output on standard output.`,
		Args:          usageArgs(cobra.NoArgs),
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(serveCmd(), statsCmd(), peekCmd(), deadCmd(), preheatCmd(), reconcileCmd(), payoutsCmd(), withdrawalsCmd(), signCmd(), smokeCmd())
	return cmd
}

func serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the whole system locally (HTTP API, poller, consumer, dashboard)",
		Long: `Run the whole system locally: the HTTP API on HOURGLASS_ADDR (default
127.0.0.1:8080), the poller loop and the consumer fed by an in-process
stand-in for SQS. Without REDIS_URL it runs on an embedded Redis whose data
is gone when it stops. Settings come from the environment (see
docs/architecture.md#configuration).
In dev mode (HOURGLASS_AUTH=dev, the default) it also serves a live dashboard
at /dashboard (it asks for HOURGLASS_ADMIN_TOKEN, or takes ?token=).
SIGINT or SIGTERM stops it cleanly after finishing the work it has claimed.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Local)
			if err != nil {
				return usageError{err}
			}
			if err := localstack.Serve(cmd.Context(), cfg, cmd.OutOrStdout(), nil); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
}
