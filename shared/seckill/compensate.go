package seckill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

// Defaults of the compensation pass.
const (
	DefaultReservedTimeout = 5 * time.Minute
	DefaultMaxRequeues     = 3
	DefaultHoldGrace       = 30 * time.Second
	DefaultRetention       = 7 * 24 * time.Hour
)

// Compensation finds flash-sale work that fell through the cracks and ends
// it: purchases still reserved long after admission (or their last
// re-enqueue) whose order job is not in Redis are enqueued again, a few
// times, then given up on; holds whose buyer died mid-purchase are settled or
// given back; preheats whose container died or stalled past their deadline
// are rolled forward (committed) or back; shards no longer in a sale whose
// order queue is empty, and items long ended whose every queue is empty
// (dead jobs included), leave the poller's list.
//
// A job that is not in Redis may be lost, dead, or in SQS (the AWS poller
// acks a job once SQS holds it), and an order write may be slow or its
// answer lost: absence proves nothing. So giving up on a purchase first
// voids its order id in the order ledger, one conditional write that a
// later CreateOrder cannot pass; only then is the purchase released. If the
// order exists already, the purchase is confirmed instead.
type Compensation struct {
	Store *Store
	// Orders is the order ledger, where a purchase given up on has its
	// order id voided (or its order found); a pass without it fails.
	Orders OrderLedger
	Clock  clock.Clock
	Log    *slog.Logger
	// ReservedTimeout is how long a reserved purchase is left alone after
	// its admission and after each re-enqueue.
	ReservedTimeout time.Duration
	MaxRequeues     int
	// HoldGrace is how long past its deadline a hold is left alone (clock
	// skew between containers).
	HoldGrace time.Duration
	// Retention is how long after its end an item stays registered.
	Retention time.Duration
	// Metrics, if set, counts purchases re-enqueued and released.
	Metrics *metrics.Emitter
}

// Report counts what a pass did. Confirmed counts purchases given up on
// whose order turned out to exist.
type Report struct {
	Requeued      int `json:"requeued"`
	Released      int `json:"released"`
	Confirmed     int `json:"confirmed"`
	HoldsSettled  int `json:"holds_settled"`
	HoldsReturned int `json:"holds_returned"`
	// ExpiriesRequeued counts expiry jobs queued again (see expiry).
	ExpiriesRequeued int `json:"expiries_requeued"`
	// Unregistered counts items forgotten: ended past their retention,
	// every order queue empty.
	Unregistered int `json:"unregistered"`
	// ShardsRetired counts shards of a sale with fewer shards than an
	// earlier one, taken out of polling once their queue was empty.
	ShardsRetired int `json:"shards_retired"`
	// PreheatsRolledForward and PreheatsRolledBack count preheats past
	// their deadline finished by the pass; StrayFreezes shards unfrozen
	// whose preheat was no longer open.
	PreheatsRolledForward int `json:"preheats_rolled_forward"`
	PreheatsRolledBack    int `json:"preheats_rolled_back"`
	StrayFreezes          int `json:"stray_freezes"`
}

func (c *Compensation) defaults() {
	c.Log = cmp.Or(c.Log, slog.Default())
	c.ReservedTimeout = cmp.Or(c.ReservedTimeout, DefaultReservedTimeout)
	c.MaxRequeues = cmp.Or(c.MaxRequeues, DefaultMaxRequeues)
	c.HoldGrace = cmp.Or(c.HoldGrace, DefaultHoldGrace)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
}

// Run makes one pass over every registered item at now.
func (c *Compensation) Run(ctx context.Context, now time.Time) (Report, error) {
	c.defaults()
	var rep Report
	if c.Orders == nil {
		return rep, errors.New("seckill: compensation needs the order ledger")
	}
	items, err := c.Store.Items(ctx)
	if err != nil {
		return rep, err
	}
	errs := []error{c.preheats(ctx, now, items, &rep)}
	for item, reg := range items {
		if err := c.item(ctx, item, reg, now, &rep); err != nil {
			errs = append(errs, fmt.Errorf("seckill: compensate %s: %w", item, err))
		}
	}
	c.Metrics.Emit(nil,
		metrics.Of(metrics.CompensationRequeued, metrics.Count, float64(rep.Requeued)),
		metrics.Of(metrics.CompensationReleased, metrics.Count, float64(rep.Released)))
	if rep != (Report{}) {
		c.Log.Info("flash-sale compensation", "requeued", rep.Requeued, "released", rep.Released, "confirmed", rep.Confirmed,
			"holds_settled", rep.HoldsSettled, "holds_returned", rep.HoldsReturned, "unregistered", rep.Unregistered,
			"expiries_requeued", rep.ExpiriesRequeued, "shards_retired", rep.ShardsRetired,
			"preheats_rolled_forward", rep.PreheatsRolledForward, "preheats_rolled_back", rep.PreheatsRolledBack,
			"stray_freezes", rep.StrayFreezes)
	}
	return rep, errors.Join(errs...)
}

func (c *Compensation) item(ctx context.Context, item string, reg Registration, now time.Time, rep *Report) error {
	metas, ok, err := c.Store.metas(ctx, item, reg.Shards)
	if err != nil || !ok {
		return err
	}
	if err := c.strayFreezes(ctx, item, metas, rep); err != nil {
		return err
	}
	pending := int64(0)
	for n, m := range metas {
		pending += m.pending()
		if m.pending() > 0 {
			if err := c.reserved(ctx, item, n, now, rep); err != nil {
				return err
			}
		}
		if err := c.holds(ctx, item, reg.Shards, n, now, rep); err != nil {
			return err
		}
	}
	// Past its retention the whole item may go; before, only the shards
	// an earlier sale had beyond this one's.
	forget := pending == 0 && now.Sub(metas[0].ends) > c.Retention
	lowest := reg.Shards
	if forget {
		lowest = 0
	}
	return c.retire(ctx, item, reg, lowest, now, rep)
}

// retire takes the item's polled shards out of polling from the top down to
// lowest, each once its order queue is empty (see retire.lua), and lowers
// the registry's polled count past them; with every shard retired the item
// is forgotten. The registry entry changes only if it is still the one
// read: a preheat that registered meanwhile wins (it polls what it touched,
// and resets its shards, which ends their retirement).
func (c *Compensation) retire(ctx context.Context, item string, reg Registration, lowest int, now time.Time, rep *Report) error {
	polled := reg.Polled
	for polled > lowest {
		k := c.Store.keys(item, polled-1)
		ok, err := retireScript.Run(ctx, c.Store.rdb, []string{k.Meta, k.Due, k.Inflight, k.Dead, k.Holds}, now.UnixMilli()).Int()
		if err != nil {
			return fmt.Errorf("seckill: retire %s: %w", k.Tag, err)
		}
		if ok != 1 {
			break
		}
		polled--
	}
	if polled == reg.Polled {
		return nil
	}
	to := ""
	if polled > 0 {
		next := reg
		next.Polled = max(polled, reg.Shards)
		if next.Polled == reg.Polled {
			return nil // sale shards retired, the item not yet forgotten: the next pass goes on
		}
		to = next.String()
	}
	ok, err := registryTrimScript.Run(ctx, c.Store.rdb, []string{registryKey(c.Store.prefix)}, item, reg.entry, to).Int()
	if err != nil || ok != 1 {
		return err
	}
	if to == "" {
		rep.Unregistered++
		c.Log.Info("item forgotten: ended past its retention, every order queue empty", "item_id", item)
		return nil
	}
	rep.ShardsRetired += reg.Polled - polled
	return nil
}

// reserved follows up overdue reserved purchases of shard n (and purchases
// awaiting payment long past their pay-by time, see expiry): those with a
// record (taken from another shard, or enqueued again before), then those
// made there as their buyer's home shard, which have none. A purchase that
// cannot be followed up now (the ledger did not answer) does not hold up
// the others.
func (c *Compensation) reserved(ctx context.Context, item string, n int, now time.Time, rep *Report) error {
	k := c.Store.keys(item, n)
	before := now.Add(-c.ReservedTimeout)
	var errs []error
	err := c.Store.scanHash(ctx, k.Purchases, func(kv []string) error {
		for i := 0; i+1 < len(kv); i += 2 {
			p, err := decodePurchase(item, n, kv[i], kv[i+1])
			if err == nil && p.Status == AwaitingPayment && p.PayBy.Before(before) {
				errs = append(errs, c.expiry(ctx, p, now, rep))
				continue
			}
			if err != nil || p.Status != Reserved || !p.UpdatedAt.Before(before) {
				continue
			}
			errs = append(errs, c.repair(ctx, p, now, before, rep))
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = c.Store.scanHash(ctx, k.Users, func(kv []string) error {
		var overdue []orderJob
		for i := 0; i+1 < len(kv); i += 2 {
			for _, ref := range parseEntry(kv[i+1]) {
				j := orderJob{pid: ref.pid, qty: ref.qty, home: n, user: kv[i]}
				if ref.shard == n && !ref.released && j.created().Before(before) {
					overdue = append(overdue, j)
				}
			}
		}
		if len(overdue) == 0 {
			return nil
		}
		pids := make([]string, len(overdue))
		for i, j := range overdue {
			pids[i] = j.pid
		}
		recs, err := c.Store.rdb.HMGet(ctx, k.Purchases, pids...).Result()
		if err != nil {
			return err
		}
		for i, j := range overdue {
			if recs[i] != nil {
				continue // it has a record: the first pass saw it
			}
			errs = append(errs, c.repair(ctx, j.reserved(item), now, before, rep))
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// repair follows up overdue reserved purchase p: its job enqueued again, or,
// after MaxRequeues, the purchase given up on (see Compensation).
func (c *Compensation) repair(ctx context.Context, p Purchase, now, before time.Time, rep *Report) error {
	k := c.Store.keys(p.ItemID, p.Shard)
	j := jobOf(p)
	res, err := repairScript.Run(ctx, c.Store.rdb, []string{k.Purchases, k.Due, k.Inflight, k.Dead, k.Users},
		j.pid, now.UnixMilli(), c.MaxRequeues, before.UnixMilli(), j.user, j.qty, j.created().UnixMilli(), p.Shard, j.String()).Slice()
	if err != nil {
		return err
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		rep.Requeued++
		c.Log.Warn("order job of a reserved purchase is not in Redis (lost, dead, or in SQS); enqueued again",
			"item_id", p.ItemID, "purchase_id", p.ID)
	case 2:
		status, done, err := c.Store.giveUp(ctx, c.Orders, p, now)
		if err != nil {
			return err
		}
		switch {
		case !done:
		case status == Confirmed:
			rep.Confirmed++
			c.Log.Warn("purchase given up on had its order after all; confirmed", "item_id", p.ItemID, "purchase_id", p.ID)
		default:
			rep.Released++
			c.Log.Error("purchase released: its order was not made in time, and its order id is now void",
				"item_id", p.ItemID, "purchase_id", p.ID)
		}
	}
	return nil
}

// expiry follows up purchase p, still awaiting payment ReservedTimeout past
// its pay-by time: its expiry job was lost or given up on (dead-lettered),
// or is in SQS. Unless it is scheduled or leased, it is queued again, due
// now (from the dead set too); a second delivery of a job in SQS finds the
// order ended and does nothing.
func (c *Compensation) expiry(ctx context.Context, p Purchase, now time.Time, rep *Report) error {
	k := c.Store.keys(p.ItemID, p.Shard)
	id := expiryJob(jobOf(p))
	var due, leased *redis.FloatCmd
	_, err := c.Store.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		due = pl.ZScore(ctx, k.Due, id)
		leased = pl.ZScore(ctx, k.Inflight, id)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	if due.Err() == nil || leased.Err() == nil {
		return nil // on its way
	}
	_, err = c.Store.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.ZRem(ctx, k.Dead, id)
		pl.ZAddNX(ctx, k.Due, redis.Z{Score: float64(now.UnixMilli()), Member: id})
		return nil
	})
	if err != nil {
		return err
	}
	rep.ExpiriesRequeued++
	c.Log.Warn("expiry job of an order awaiting payment past its pay-by time is not in Redis (lost, dead, or in SQS); enqueued again",
		"item_id", p.ItemID, "purchase_id", p.ID, "pay_by", clock.Format(p.PayBy))
	return nil
}

// holds ends the holds of home shard n whose deadline passed HoldGrace ago.
func (c *Compensation) holds(ctx context.Context, item string, shards, n int, now time.Time, rep *Report) error {
	k := c.Store.keys(item, n)
	members, err := c.Store.rdb.ZRangeByScore(ctx, k.Holds, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(now.Add(-c.HoldGrace).UnixMilli(), 10), Count: 100,
	}).Result()
	if err != nil {
		return err
	}
	for _, m := range members {
		f := strings.SplitN(m, "|", 3)
		if len(f) != 3 {
			continue
		}
		qty, _ := strconv.Atoi(f[1])
		a := attempt{item: item, pid: f[0], qty: qty, user: f[2], home: n, shards: shards}
		at, err := c.Store.find(ctx, item, shards, a.pid)
		if err != nil {
			return err
		}
		if at >= 0 {
			if err := c.Store.settle(ctx, a, at); err != nil {
				return err
			}
			rep.HoldsSettled++
			continue
		}
		if _, err := c.Store.unclaim(ctx, item, n, a.user, a.pid, qty, true); err != nil {
			return err
		}
		rep.HoldsReturned++
	}
	return nil
}

// find returns the shard that records purchase pid, or -1.
func (s *Store) find(ctx context.Context, item string, shards int, pid string) (int, error) {
	cmds := make([]*redis.BoolCmd, shards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := range shards {
			cmds[n] = p.HExists(ctx, s.keys(item, n).Purchases, pid)
		}
		return nil
	})
	if err != nil {
		return -1, err
	}
	for n, c := range cmds {
		if c.Val() {
			return n, nil
		}
	}
	return -1, nil
}
