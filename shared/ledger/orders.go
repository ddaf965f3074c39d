package ledger

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
//
// An order with a payment window has more in a second hash of the same
// slot, "<tag>:payments": "<order id>" -> "<amount>|<currency>|<pay by ms>"
// (its terms, written once before the order), "<order id>:end" ->
// "paid|<at ms>" or "expired|<at ms>" (written once: the first end wins
// for good), and "<order id>|<event id>" -> "<outcome>|<end>|<at ms>" (each
// payment event as applied). The webhook knows only the order id: the index
// "<prefix>seckill:orders", order id -> "<shard>|<item>", written before the
// order, finds its shard (one key outside every item's slot, written and
// read on its own).
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

func (l *RedisOrders) paymentsKey(item string, shard int) string {
	return delayq.KeysOf(l.prefix, seckill.QueueName(item), shard).Key("payments")
}

func (l *RedisOrders) indexKey() string { return l.prefix + "seckill:orders" }

// CreateOrder implements seckill.OrderLedger: the order is written unless
// its id holds a value; an order there (this one, written by an earlier call
// whose answer was lost, or a duplicate delivery's) is success, a tombstone
// is seckill.ErrOrderVoided.
func (l *RedisOrders) CreateOrder(ctx context.Context, o seckill.Order) error {
	rec := o.PurchaseID + "|" + strconv.Itoa(o.Quantity) + "|" + strconv.FormatInt(o.CreatedAt.UnixMilli(), 10) + "|" + o.UserID
	if !o.PayBy.IsZero() {
		// The index and the terms first: an order is never without them.
		err := l.rdb.HSet(ctx, l.indexKey(), o.ID, strconv.Itoa(o.Shard)+"|"+o.ItemID).Err()
		if err == nil {
			err = l.rdb.HSetNX(ctx, l.paymentsKey(o.ItemID, o.Shard), o.ID,
				o.Amount+"|"+o.Currency+"|"+strconv.FormatInt(o.PayBy.UnixMilli(), 10)).Err()
		}
		if err != nil {
			return fmt.Errorf("ledger: create order %s: %w", o.ID, err)
		}
	}
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

var (
	//go:embed lua/pay.lua
	paySrc    string
	payScript = redis.NewScript(paySrc)
)

// FindOrder implements seckill.OrderLedger. o names the order: its ID and,
// if known, its ItemID and Shard (else the index has them).
func (l *RedisOrders) FindOrder(ctx context.Context, o seckill.Order) (seckill.Order, error) {
	if o.ItemID == "" {
		at, err := l.rdb.HGet(ctx, l.indexKey(), o.ID).Result()
		if errors.Is(err, redis.Nil) {
			return seckill.Order{}, seckill.ErrNoOrder
		}
		if err != nil {
			return seckill.Order{}, fmt.Errorf("ledger: look up order %s: %w", o.ID, err)
		}
		shard, item, _ := strings.Cut(at, "|")
		if o.Shard, err = strconv.Atoi(shard); err != nil {
			return seckill.Order{}, fmt.Errorf("ledger: index entry of order %s: %q", o.ID, at)
		}
		o.ItemID = item
	}
	pk := l.paymentsKey(o.ItemID, o.Shard)
	var rec, terms, end *redis.StringCmd
	_, err := l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HGet(ctx, l.key(o.ItemID, o.Shard), o.ID)
		terms = p.HGet(ctx, pk, o.ID)
		end = p.HGet(ctx, pk, o.ID+":end")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return seckill.Order{}, fmt.Errorf("ledger: read order %s: %w", o.ID, err)
	}
	f := strings.SplitN(rec.Val(), "|", 4)
	if len(f) != 4 || strings.HasPrefix(rec.Val(), voidPrefix) {
		return seckill.Order{}, seckill.ErrNoOrder
	}
	out := seckill.Order{ID: o.ID, PurchaseID: f[0], ItemID: o.ItemID, UserID: f[3], Shard: o.Shard}
	out.Quantity, _ = strconv.Atoi(f[1])
	out.CreatedAt = msTime(f[2])
	if t := strings.SplitN(terms.Val(), "|", 3); len(t) == 3 {
		out.Amount, out.Currency, out.PayBy = t[0], t[1], msTime(t[2])
	}
	if e, at, ok := strings.Cut(end.Val(), "|"); ok {
		out.End, out.EndedAt = seckill.OrderEnd(e), msTime(at)
	}
	return out, nil
}

func msTime(v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// SettlePayment implements seckill.OrderLedger: read the order and the
// event, decide, then apply with pay.lua as a compare-and-set on the end
// read.
func (l *RedisOrders) SettlePayment(ctx context.Context, p seckill.Payment) (seckill.Order, seckill.PaymentResult, error) {
	for range 10 {
		o, err := l.FindOrder(ctx, seckill.Order{ID: p.OrderID})
		if err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, err
		}
		d := seckill.DecideOrder(o, p)
		if d.Err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, d.Err // no window: nothing to pay
		}
		outcome, end := d.Outcome, d.End
		setEnd := ""
		if d.SetEnd {
			setEnd = string(end) + "|" + strconv.FormatInt(d.At.UnixMilli(), 10)
		}
		res, err := payScript.Run(ctx, l.rdb, []string{l.paymentsKey(o.ItemID, o.Shard)},
			o.ID+":end", o.ID+"|"+p.EventID, string(o.End), setEnd,
			string(outcome)+"|"+string(end)+"|"+strconv.FormatInt(p.At.UnixMilli(), 10)).Slice()
		if err != nil {
			return seckill.Order{}, seckill.PaymentResult{}, fmt.Errorf("ledger: apply payment %s: %w", p.EventID, err)
		}
		code, _ := res[0].(int64)
		if code == 0 {
			continue
		}
		rec, _ := res[1].(string)
		r := decodePaymentResult(rec)
		r.Replayed = code == 2
		if code == 1 && end != o.End {
			o.End, o.EndedAt = end, p.At.UTC()
		}
		if r.Replayed {
			// The order as it stands now; the answer as it was.
			if o, err = l.FindOrder(ctx, o); err != nil {
				return seckill.Order{}, seckill.PaymentResult{}, err
			}
		}
		return o, r, nil
	}
	return seckill.Order{}, seckill.PaymentResult{}, fmt.Errorf("ledger: apply payment %s: the order keeps changing", p.EventID)
}

// decodePaymentResult reads "<outcome>|<end>|<at ms>".
func decodePaymentResult(rec string) seckill.PaymentResult {
	f := strings.SplitN(rec, "|", 3)
	for len(f) < 3 {
		f = append(f, "")
	}
	return seckill.PaymentResult{Outcome: seckill.PaymentOutcome(f[0]), End: seckill.OrderEnd(f[1]), At: msTime(f[2])}
}

// ExpireOrder implements seckill.OrderLedger: the end is written unless one
// is there (HSETNX), and read back.
func (l *RedisOrders) ExpireOrder(ctx context.Context, o seckill.Order, now time.Time) (seckill.OrderEnd, error) {
	held, err := l.FindOrder(ctx, o)
	if err != nil {
		return "", err
	}
	d := seckill.DecideOrder(held, seckill.Expire{Now: now})
	switch {
	case errors.Is(d.Err, seckill.ErrNoOrder):
		return "", seckill.ErrNotDue // no window: it never expires
	case d.Err != nil:
		return "", d.Err
	case !d.SetEnd:
		return d.End, nil
	}
	// The first end wins for good (HSETNX); the one there is the answer.
	pk := l.paymentsKey(held.ItemID, held.Shard)
	var end *redis.StringCmd
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, pk, o.ID+":end", string(d.End)+"|"+strconv.FormatInt(d.At.UnixMilli(), 10))
		end = p.HGet(ctx, pk, o.ID+":end")
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("ledger: expire order %s: %w", o.ID, err)
	}
	e, _, _ := strings.Cut(end.Val(), "|")
	return seckill.OrderEnd(e), nil
}
