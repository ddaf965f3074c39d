package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO")
}

// benchMemory: Redis bytes per scheduled withdrawal with the Redis ledger
// (record, user index, idempotency key and its expiry, schedule), from INFO
// memory before and after scheduling 100,000 through the service.
func benchMemory(ctx context.Context, rdb redis.UniversalClient, _ *server, rep *report, quick bool) error {
	n := 100_000
	if quick {
		n = 10_000
	}
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 1})
	if err != nil {
		return err
	}
	svc, err := withdrawal.NewService(withdrawal.Config{
		Ledger: ledger.NewRedis(rdb, q), Clock: clock.System{}, ShardFor: q.ShardFor,
		Rules: withdrawal.Rules{Currencies: []string{"CNY"}, MaxAmount: decimal.RequireFromString("1000000"),
			DefaultDelay: 0, MaxDelay: 30 * 24 * 3600 * 1e9},
	})
	if err != nil {
		return err
	}
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	body := []byte(`{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 32 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				user := "user-" + strconv.FormatInt(i%5000, 10)
				if _, err := svc.Create(ctx, user, "key-"+strconv.FormatInt(i, 10), body); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	per := float64(after-before) / float64(n)
	rep.add(row{Key: "bytes_per_job", Figure: "Redis memory per scheduled withdrawal, Redis ledger (bytes)", Value: per,
		Note: fmt.Sprintf("%d withdrawals of 5,000 users: used_memory %d -> %d; includes the ledger record, the user's index, "+
			"the idempotency key (kept 24 h) and the schedule", n, before, after)})
	return nil
}
