package ledger

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// reconcileBatch bounds one page of the open set.
const reconcileBatch = 500

// Reconcile makes one pass over the Redis ledger: every withdrawal not done
// with (its open-set time plus Grace passed) must have a job, due or leased;
// one that lost it (its job ended in a dead-letter queue after failing every
// delivery, say while finance was down) gets it back. Records and jobs share
// a slot, so nothing else can come apart.
func (l *Redis) Reconcile(ctx context.Context, now time.Time) (Reconciliation, error) {
	grace := l.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	var rep Reconciliation
	max := strconv.FormatInt(now.Add(-grace).UnixMilli(), 10)
	for n := range l.q.Shards() {
		k := l.q.Keys(n)
		for offset := int64(0); ; offset += reconcileBatch {
			ids, err := l.rdb.ZRangeByScore(ctx, openKey(k), &redis.ZRangeBy{
				Min: "-inf", Max: max, Offset: offset, Count: reconcileBatch,
			}).Result()
			if err != nil {
				return rep, fmt.Errorf("ledger: reconcile %s: %w", k.Tag, err)
			}
			if err := l.repair(ctx, n, ids, now, &rep); err != nil {
				return rep, err
			}
			if len(ids) < reconcileBatch {
				break
			}
		}
	}
	return rep, nil
}

func (l *Redis) repair(ctx context.Context, n int, ids []string, now time.Time, rep *Reconciliation) error {
	if len(ids) == 0 {
		return nil
	}
	refs := make([]delayq.Ref, len(ids))
	for i, id := range ids {
		refs[i] = delayq.Ref{Shard: n, ID: id}
	}
	held, err := l.q.Holds(ctx, refs)
	if err != nil {
		return err
	}
	k := l.q.Keys(n)
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if !held[i] {
				cmds[i] = p.HMGet(ctx, recordKey(k, id), "status", "told")
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ledger: reconcile %s: %w", k.Tag, err)
	}
	for i, id := range ids {
		if held[i] {
			continue
		}
		v := cmds[i].Val()
		status, _ := v[0].(string)
		told, _ := v[1].(string)
		switch withdrawal.Status(status) {
		case withdrawal.Scheduled, withdrawal.Retrying:
			rep.Scheduled++
		case withdrawal.Processing:
			rep.Redispatched++
		case withdrawal.Paid, withdrawal.Failed, withdrawal.Returned:
			if told == status {
				continue
			}
			rep.Renotified++
		default: // cancelled or gone: nothing to do
			continue
		}
		if err := l.q.Add(ctx, n, id, now); err != nil {
			return err
		}
	}
	return nil
}

// Outstanding runs fn over every withdrawal not done with (the open sets),
// a page at a time: what `hourglass payouts unresolved` looks through.
func (l *Redis) Outstanding(ctx context.Context, fn func(withdrawal.Withdrawal) error) error {
	for n := range l.q.Shards() {
		k := l.q.Keys(n)
		for offset := int64(0); ; offset += reconcileBatch {
			ids, err := l.rdb.ZRange(ctx, openKey(k), offset, offset+reconcileBatch-1).Result()
			if err != nil {
				return fmt.Errorf("ledger: outstanding in %s: %w", k.Tag, err)
			}
			ws, err := l.records(ctx, n, ids)
			if err != nil {
				return err
			}
			for _, w := range ws {
				if err := fn(w); err != nil {
					return err
				}
			}
			if len(ids) < reconcileBatch {
				break
			}
		}
	}
	return nil
}
