package ledger

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// RedisOrders is the order ledger on Redis: an item shard's orders live in
// one hash beside the shard, "<prefix>{dq:sk:<item>:<n>}:orders", order id ->
// "<purchase id>|<quantity>|<created ms>|<user>".
type RedisOrders struct {
	rdb    redis.Cmdable
	prefix string
}

var _ seckill.OrderLedger = (*RedisOrders)(nil)

// NewRedisOrders returns the Redis order ledger with key prefix prefix.
func NewRedisOrders(rdb redis.Cmdable, prefix string) *RedisOrders {
	return &RedisOrders{rdb: rdb, prefix: prefix}
}

func (l *RedisOrders) key(item string, shard int) string {
	return delayq.KeysOf(l.prefix, seckill.QueueName(item), shard).Key("orders")
}

// CreateOrder implements seckill.OrderLedger: the first write of an order id
// wins and later ones change nothing (HSETNX).
func (l *RedisOrders) CreateOrder(ctx context.Context, o seckill.Order) error {
	rec := o.PurchaseID + "|" + strconv.Itoa(o.Quantity) + "|" + strconv.FormatInt(o.CreatedAt.UnixMilli(), 10) + "|" + o.UserID
	if err := l.rdb.HSetNX(ctx, l.key(o.ItemID, o.Shard), o.ID, rec).Err(); err != nil {
		return fmt.Errorf("ledger: create order %s: %w", o.ID, err)
	}
	return nil
}

// Order reports whether order id of an item shard exists, and its record.
func (l *RedisOrders) Order(ctx context.Context, item string, shard int, id string) (string, bool, error) {
	rec, err := l.rdb.HGet(ctx, l.key(item, shard), id).Result()
	if err == redis.Nil {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("ledger: read order %s: %w", id, err)
	}
	return rec, true, nil
}
