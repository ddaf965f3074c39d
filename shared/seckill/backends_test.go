package seckill_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// The race and model tests run the flash sale over each order ledger: the
// Redis one (on miniredis for speed, on a real redis-server for truth) and
// the DynamoDB one on dynalite, with the sale's own state on a real
// redis-server.

// ledgerEntry is what an order ledger holds under one order id: an order,
// or the tombstone of an order that may never be made.
type ledgerEntry struct {
	purchase string
	user     string
	qty      int
	voided   bool
}

// orderBackend is one order ledger with the Redis the sale runs on.
type orderBackend struct {
	name string
	rdb  *redis.Client
	// ledger returns the order ledger, on rdb (Redis) or dynalite.
	ledger func() seckill.OrderLedger
	// entries reads everything the ledger holds for item (shards 0..maxShards-1).
	entries func(ctx context.Context, item string, maxShards int) (map[string]ledgerEntry, error)
	// reset empties the Redis and the ledger between runs.
	reset func(ctx context.Context) error
}

// redisOrderBackend is the Redis order ledger on rdb.
func redisOrderBackend(name string, rdb *redis.Client) orderBackend {
	return orderBackend{
		name:   name,
		rdb:    rdb,
		ledger: func() seckill.OrderLedger { return ledger.NewRedisOrders(rdb, "hg:") },
		entries: func(ctx context.Context, item string, maxShards int) (map[string]ledgerEntry, error) {
			out := map[string]ledgerEntry{}
			for n := range maxShards {
				all, err := rdb.HGetAll(ctx, delayq.KeysOf("hg:", seckill.QueueName(item), n).Key("orders")).Result()
				if err != nil {
					return nil, err
				}
				for id, rec := range all {
					out[id] = parseRedisOrder(rec)
				}
			}
			return out, nil
		},
		reset: func(ctx context.Context) error { return rdb.FlushAll(ctx).Err() },
	}
}

// parseRedisOrder reads a Redis order ledger value: an order,
// "<purchase id>|<quantity>|<created ms>|<user>", or a tombstone, which
// starts "void|".
func parseRedisOrder(rec string) ledgerEntry {
	if strings.HasPrefix(rec, "void|") {
		f := strings.Split(rec, "|")
		e := ledgerEntry{voided: true}
		if len(f) > 1 {
			e.purchase = f[1]
		}
		return e
	}
	f := strings.SplitN(rec, "|", 4)
	if len(f) != 4 {
		return ledgerEntry{purchase: "unreadable:" + rec}
	}
	qty, _ := strconv.Atoi(f[1])
	return ledgerEntry{purchase: f[0], qty: qty, user: f[3]}
}

var orderTableSeq atomic.Int64

// dynamoOrderBackend is the DynamoDB order ledger on db, the sale's state on
// rdb.
func dynamoOrderBackend(t testing.TB, rdb *redis.Client, db *dynalitetest.Server) orderBackend {
	t.Helper()
	n := orderTableSeq.Add(1)
	tables := ledger.Tables{Withdrawals: fmt.Sprintf("sk-withdrawals-%d", n), Orders: fmt.Sprintf("sk-orders-%d", n),
		Idempotency: fmt.Sprintf("sk-idempotency-%d", n)}
	api := db.Client()
	if err := ledger.CreateTables(context.Background(), api, tables); err != nil {
		t.Fatal(err)
	}
	// The withdrawal side of the ledger is not used here; it needs a queue.
	wq, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(ctx context.Context) ([]map[string]types.AttributeValue, error) {
		var items []map[string]types.AttributeValue
		var start map[string]types.AttributeValue
		for {
			out, err := api.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(tables.Orders), ExclusiveStartKey: start, ConsistentRead: aws.Bool(true)})
			if err != nil {
				return nil, err
			}
			items = append(items, out.Items...)
			if start = out.LastEvaluatedKey; len(start) == 0 {
				return items, nil
			}
		}
	}
	str := func(it map[string]types.AttributeValue, k string) string {
		if v, ok := it[k].(*types.AttributeValueMemberS); ok {
			return v.Value
		}
		if v, ok := it[k].(*types.AttributeValueMemberN); ok {
			return v.Value
		}
		return ""
	}
	return orderBackend{
		name: "dynamodb",
		rdb:  rdb,
		ledger: func() seckill.OrderLedger {
			return ledger.NewDynamo(api, tables, wq, ledger.DynamoOptions{Logger: quiet})
		},
		entries: func(ctx context.Context, item string, _ int) (map[string]ledgerEntry, error) {
			items, err := scan(ctx)
			if err != nil {
				return nil, err
			}
			out := map[string]ledgerEntry{}
			for _, it := range items {
				if str(it, "item_id") != item && str(it, "item_id") != "" {
					continue
				}
				qty, _ := strconv.Atoi(str(it, "quantity"))
				_, voided := it["voided_at"]
				out[str(it, "id")] = ledgerEntry{purchase: str(it, "purchase_id"), user: str(it, "user_id"), qty: qty, voided: voided}
			}
			return out, nil
		},
		reset: func(ctx context.Context) error {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				return err
			}
			items, err := scan(ctx)
			if err != nil {
				return err
			}
			for _, it := range items {
				if _, err := api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(tables.Orders),
					Key: map[string]types.AttributeValue{"id": it["id"]}}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// eachOrderBackend runs fn as a subtest on the Redis order ledger (miniredis
// and a real redis-server) and on the DynamoDB one (dynalite).
func eachOrderBackend(t *testing.T, fn func(t *testing.T, b orderBackend)) {
	t.Helper()
	for _, rb := range redistest.Backends(t) {
		t.Run(rb.Name, func(t *testing.T) { fn(t, redisOrderBackend(rb.Name, rb.Client)) })
	}
	t.Run("dynamodb", func(t *testing.T) {
		rdb := redistest.Start(t).Client(t)
		fn(t, dynamoOrderBackend(t, rdb, dynalitetest.Start(t)))
	})
}
