package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/localstack"
	"github.com/hourglass/hourglass/shared/redisconn"
)

// Which stack an operator command acts on. With REDIS_URL set, that Redis;
// without it, the local stack a running `hourglass serve` advertises (see
// localstack.Advert): the CLI finds it with no port to copy out of a log.
// With several running, --stack ADDR (or HOURGLASS_STACK) picks one by its
// HTTP address, and wins over REDIS_URL. Every command that reads or changes
// state says first, on standard error, which stack and prefix it acts on.

// stackEnv names the local stack to act on, as --stack does.
const stackEnv = "HOURGLASS_STACK"

// stateDirKey carries, in tests, the directory adverts are looked for in.
type stateDirKey struct{}

func stateDir(ctx context.Context) (string, error) {
	if d, ok := ctx.Value(stateDirKey{}).(string); ok {
		return d, nil
	}
	return localstack.StateDir()
}

// stackAddr is the local stack asked for by --stack or HOURGLASS_STACK.
func stackAddr(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("stack"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return os.Getenv(stackEnv)
}

// findStack returns the running local stack at addr, or the only one when
// addr is empty.
func findStack(ctx context.Context, addr string) (localstack.Advert, error) {
	dir, err := stateDir(ctx)
	if err != nil {
		return localstack.Advert{}, err
	}
	live, err := localstack.FindAdverts(dir)
	if err != nil {
		return localstack.Advert{}, err
	}
	addrs := make([]string, len(live))
	for i, a := range live {
		if a.Addr == addr {
			return a, nil
		}
		addrs[i] = fmt.Sprintf("%s (pid %d)", a.Addr, a.PID)
	}
	switch {
	case addr != "" && len(live) == 0:
		return localstack.Advert{}, fmt.Errorf("no hourglass serve runs at %s (none runs on this machine)", addr)
	case addr != "":
		return localstack.Advert{}, fmt.Errorf("no hourglass serve runs at %s; running: %s", addr, strings.Join(addrs, ", "))
	case len(live) == 1:
		return live[0], nil
	case len(live) == 0:
		return localstack.Advert{}, errors.New("REDIS_URL is not set and no hourglass serve runs on this machine: " +
			"start one (make run), or set REDIS_URL to the Redis of the stack to operate (e.g. redis://127.0.0.1:6379)")
	}
	return localstack.Advert{}, fmt.Errorf("%d hourglass serve processes run: %s; pick one with --stack ADDR (or %s)",
		len(live), strings.Join(addrs, ", "), stackEnv)
}

// useStack points cfg at the advertised stack: its Redis and every setting
// that names its data.
func useStack(cfg *config.Config, a localstack.Advert) {
	cfg.RedisURL = config.Secret(a.RedisURL)
	cfg.RedisPrefix = a.RedisPrefix
	cfg.QueueShards = a.QueueShards
	cfg.Ledger = a.Ledger
	if a.Ledger == "dynamodb" {
		cfg.DynamoDBEndpoint = a.DynamoDBEndpoint
		cfg.WithdrawalsTable, cfg.OrdersTable, cfg.IdempotencyTable = a.WithdrawalsTable, a.OrdersTable, a.IdempotencyTable
	}
}

// advertOf is what a serve of cfg, running as r, tells the CLI.
func advertOf(cfg config.Config, r localstack.Running, pid int, started time.Time) localstack.Advert {
	a := localstack.Advert{
		PID: pid, Addr: r.Addr, StartedAt: started, RedisURL: r.RedisURL, Embedded: r.Embedded,
		RedisPrefix: cfg.RedisPrefix, QueueShards: cfg.QueueShards, Ledger: cfg.Ledger,
	}
	if cfg.Ledger == "dynamodb" {
		a.DynamoDBEndpoint = cfg.DynamoDBEndpoint
		a.WithdrawalsTable, a.OrdersTable, a.IdempotencyTable = cfg.WithdrawalsTable, cfg.OrdersTable, cfg.IdempotencyTable
	}
	return a
}

// resolveStack settles which stack cmd acts on: cfg as loaded from the
// environment (byURL), or pointed at a running local stack. It returns the
// line that says so.
func resolveStack(cmd *cobra.Command, cfg *config.Config) (line string, byURL bool, err error) {
	addr := stackAddr(cmd)
	if addr == "" && cfg.RedisURL != "" {
		return fmt.Sprintf("%s (REDIS_URL), prefix %q", redisconn.Redacted(string(cfg.RedisURL)), cfg.RedisPrefix), true, nil
	}
	a, err := findStack(cmd.Context(), addr)
	if err != nil {
		return "", false, usageError{err}
	}
	useStack(cfg, a)
	if err := cfg.Check(); err != nil {
		return "", false, usageError{err}
	}
	return fmt.Sprintf("the local stack at %s (hourglass serve, pid %d): %s, prefix %q",
		a.Addr, a.PID, redisconn.Redacted(a.RedisURL), a.RedisPrefix), false, nil
}

// hasData reports whether Redis holds any key under prefix (or could not
// tell): a command pointed at an unrelated Redis finds none, and says so
// rather than report an empty stack as a healthy one. Only a command that
// names its Redis by REDIS_URL asks: an advertised stack is the one meant.
func hasData(ctx context.Context, rdb redis.UniversalClient, prefix string) bool {
	has, err := holdsData(ctx, rdb, prefix)
	return has || err != nil
}

// holdsData reports whether Redis holds any key under prefix.
func holdsData(ctx context.Context, rdb redis.UniversalClient, prefix string) (bool, error) {
	// SCAN may answer empty pages before a match: a few pages settle it
	// for a small keyspace, which is the case that matters here.
	scan := func(ctx context.Context, c redis.Cmdable) (bool, error) {
		var cursor uint64
		for range 16 {
			page, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
			if err != nil || len(page) > 0 {
				return len(page) > 0, err
			}
			if cursor = next; cursor == 0 {
				return false, nil
			}
		}
		return true, nil // a large keyspace: do not claim it is empty
	}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb)
	}
	found := make(chan struct{}, 1)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		has, err := scan(ctx, node)
		if has {
			select {
			case found <- struct{}{}:
			default:
			}
		}
		return err
	})
	return len(found) > 0, err
}
