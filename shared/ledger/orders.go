package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// RedisOrders is the order ledger on Redis: an item shard's orders live in
// one hash beside the shard, "<prefix>{dq:sk:<item>:<n>}:orders", order id ->
// "<purchase id>|<quantity>|<created ms>|<user>" for an order, or
// "void|<purchase id>|<voided ms>" for an order id given up on (a tombstone).
// Each id is written once (HSETNX): the first of an order and a tombstone
// wins for good.
type RedisOrders struct {
	rdb    redis.Cmdable
	prefix string
}

var _ seckill.OrderLedger = (*RedisOrders)(nil)

// voidPrefix starts a tombstone; an order starts with its purchase id
// ("pu_...").
const voidPrefix = "void|"

// NewRedisOrders returns the Redis order ledger with key prefix prefix.
func NewRedisOrders(rdb redis.Cmdable, prefix string) *RedisOrders {
	return &RedisOrders{rdb: rdb, prefix: prefix}
}

func (l *RedisOrders) key(item string, shard int) string {
	return delayq.KeysOf(l.prefix, seckill.QueueName(item), shard).Key("orders")
}

// CreateOrder implements seckill.OrderLedger: the order is written unless
// its id holds a value; an order there (this one, written by an earlier call
// whose answer was lost, or a duplicate delivery's) is success, a tombstone
// is seckill.ErrOrderVoided.
func (l *RedisOrders) CreateOrder(ctx context.Context, o seckill.Order) error {
	rec := o.PurchaseID + "|" + strconv.Itoa(o.Quantity) + "|" + strconv.FormatInt(o.CreatedAt.UnixMilli(), 10) + "|" + o.UserID
	held, err := l.claim(ctx, o, rec)
	if err != nil {
		return fmt.Errorf("ledger: create order %s: %w", o.ID, err)
	}
	if strings.HasPrefix(held, voidPrefix) {
		return fmt.Errorf("ledger: create order %s: %w", o.ID, seckill.ErrOrderVoided)
	}
	return nil
}

// VoidOrder implements seckill.OrderLedger: a tombstone is written unless the
// id holds a value; a tombstone there (ours, resent, or another pass's) is
// success, an order means ordered.
func (l *RedisOrders) VoidOrder(ctx context.Context, o seckill.Order) (bool, error) {
	held, err := l.claim(ctx, o, voidPrefix+o.PurchaseID+"|"+strconv.FormatInt(o.CreatedAt.UnixMilli(), 10))
	if err != nil {
		return false, fmt.Errorf("ledger: void order %s: %w", o.ID, err)
	}
	return !strings.HasPrefix(held, voidPrefix), nil
}

// claim writes value under o's id unless the id holds one, and returns what
// it holds after. One round trip; HSETNX and HGET need not be atomic, as the
// value, once there, never changes. go-redis resends the pair when a reply is
// lost: the resend reads back the value the first wrote.
func (l *RedisOrders) claim(ctx context.Context, o seckill.Order, value string) (string, error) {
	key := l.key(o.ItemID, o.Shard)
	var held *redis.StringCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, key, o.ID, value)
		held = p.HGet(ctx, key, o.ID)
		return nil
	})
	if err != nil {
		return "", err
	}
	return held.Val(), nil
}

// Order reports whether order id of an item shard exists, and its record;
// a voided id holds no order.
func (l *RedisOrders) Order(ctx context.Context, item string, shard int, id string) (string, bool, error) {
	rec, err := l.rdb.HGet(ctx, l.key(item, shard), id).Result()
	if err == redis.Nil || strings.HasPrefix(rec, voidPrefix) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("ledger: read order %s: %w", id, err)
	}
	return rec, true, nil
}
