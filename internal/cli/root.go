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
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/localstack"
	"github.com/hourglass/hourglass/shared/redisguard"
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
		Args:          subcommandArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.PersistentFlags().String("stack", "", "the local stack to act on, by its address, when several hourglass serve run (HOURGLASS_STACK)")
	cmd.AddCommand(serveCmd(), statsCmd(), peekCmd(), deadCmd(), preheatCmd(), reconcileCmd(), payoutsCmd(), withdrawalsCmd(), signCmd(), smokeCmd())
	return cmd
}

func serveCmd() *cobra.Command {
	var addr, redisURL, redisCommands string
	var logMetrics bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the whole system locally (HTTP API, poller, consumer, dashboard)",
		Long: `Run the whole system locally: the HTTP API on HOURGLASS_ADDR (default
127.0.0.1:8080), the poller loop and the consumer fed by an in-process
stand-in for SQS. Without REDIS_URL it runs on an embedded Redis whose data
is gone when it stops. Settings come from the environment (see
docs/architecture.md#configuration); --addr and --redis-url override the two
changed most. --redis-commands elasticache-serverless (HOURGLASS_REDIS_COMMANDS)
refuses, before sending, every Redis command ElastiCache Serverless does not
serve, as the serverless profile's functions do.
In dev mode (HOURGLASS_AUTH=dev, the default) it also serves a live dashboard
at /dashboard (it asks for HOURGLASS_ADMIN_TOKEN, or takes ?token=).
While it runs, the operator commands on this machine (stats, dead, payouts,
...) find it by themselves: it advertises its Redis and settings in
HOURGLASS_STATE_DIR (the user's cache directory by default), readable by its
user only, and removes the advert when it stops.
The terminal shows logs, finance messages and order events as JSON lines;
metric lines feed the dashboard and its /metrics (--log-metrics prints them
too). If Redis stops answering it says so once, tries again backing off, and
says when it is back.
SIGINT or SIGTERM stops it cleanly after finishing the work it has claimed,
with exit status 0.`,
		Example: `  hourglass serve
  hourglass serve --addr 127.0.0.1:8081 --redis-url redis://127.0.0.1:6379
  HOURGLASS_LEDGER=dynamodb DYNAMODB_ENDPOINT=http://127.0.0.1:4567 HOURGLASS_CREATE_TABLES=true hourglass serve`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(config.Local)
			if err != nil {
				return usageError{err}
			}
			if cmd.Flags().Changed("addr") {
				cfg.Addr = addr
			}
			if cmd.Flags().Changed("redis-url") {
				cfg.RedisURL = config.Secret(redisURL)
			}
			if cmd.Flags().Changed("log-metrics") {
				cfg.LogMetrics = logMetrics
			}
			if cmd.Flags().Changed("redis-commands") {
				if _, err := redisguard.ParseProfile(redisCommands); err != nil {
					return usageError{fmt.Errorf("--redis-commands: %w", err)}
				}
				cfg.RedisCommands = redisCommands
			}
			if err := localLedgerReachable(cfg); err != nil {
				return usageError{err}
			}
			dir, err := stateDir(cmd.Context())
			if err != nil {
				return err
			}
			var unadvertise func()
			ready := func(r localstack.Running) {
				a := advertOf(cfg, r, os.Getpid(), time.Now().UTC())
				if unadvertise, err = localstack.WriteAdvert(dir, a); err != nil {
					// The stack works without it; the CLI then needs REDIS_URL.
					_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "hourglass: the operator commands will not find this stack by themselves:", err)
				}
			}
			err = localstack.Serve(cmd.Context(), cfg, cmd.OutOrStdout(), ready)
			if unadvertise != nil {
				unadvertise()
			}
			if errors.Is(err, localstack.ErrAddrInUse) {
				if a, ferr := findStack(cmd.Context(), cfg.Addr); ferr == nil {
					return fmt.Errorf("serve: hourglass serve (pid %d, since %s) already runs at %s: %w",
						a.PID, a.StartedAt.Format(time.RFC3339), a.Addr, err)
				}
			}
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "the HTTP API's address (HOURGLASS_ADDR; default 127.0.0.1:8080)")
	cmd.Flags().StringVar(&redisURL, "redis-url", "", "the Redis to run on (REDIS_URL; default an embedded one)")
	cmd.Flags().BoolVar(&logMetrics, "log-metrics", false, "also print the metric lines (HOURGLASS_LOG_METRICS)")
	cmd.Flags().StringVar(&redisCommands, "redis-commands", "", "the Redis command profile: all or elasticache-serverless (HOURGLASS_REDIS_COMMANDS; default all)")
	return cmd
}

// awsCredentialEnv are the variables that give the AWS SDK credentials
// without EC2 instance metadata.
var awsCredentialEnv = []string{
	"AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
}

// sharedAWSConfig reports whether the AWS SDK finds a shared credentials
// or config file (~/.aws/credentials, ~/.aws/config, or the files the
// environment names), whose default profile may hold credentials.
func sharedAWSConfig() bool {
	home, _ := os.UserHomeDir()
	for _, f := range []struct{ env, name string }{
		{"AWS_SHARED_CREDENTIALS_FILE", "credentials"}, {"AWS_CONFIG_FILE", "config"},
	} {
		path := os.Getenv(f.env)
		if path == "" && home != "" {
			path = filepath.Join(home, ".aws", f.name)
		}
		if st, err := os.Stat(path); path != "" && err == nil && !st.IsDir() {
			return true
		}
	}
	return false
}

// localLedgerReachable refuses, before anything starts, a DynamoDB ledger
// that the local stack could only reach by asking EC2 instance metadata for
// credentials (a minute of failed calls, then errors): no endpoint and no
// AWS credentials in the environment.
func localLedgerReachable(cfg config.Config) error {
	if cfg.Ledger != "dynamodb" || cfg.DynamoDBEndpoint != "" {
		return nil
	}
	for _, v := range awsCredentialEnv {
		if os.Getenv(v) != "" {
			return nil
		}
	}
	if sharedAWSConfig() {
		return nil
	}
	return errors.New("HOURGLASS_LEDGER=dynamodb needs DYNAMODB_ENDPOINT locally: run dynalite " +
		"(npx dynalite --port 4567) and start with DYNAMODB_ENDPOINT=http://127.0.0.1:4567 HOURGLASS_CREATE_TABLES=true; " +
		"for AWS's own DynamoDB, give AWS credentials and a region (AWS_PROFILE, ~/.aws/credentials or AWS_ACCESS_KEY_ID; AWS_REGION)")
}

// subcommandArgs is the Args of a command that only groups others: a word
// that names none of them is refused with the nearest names.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}
