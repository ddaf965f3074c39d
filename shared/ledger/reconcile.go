package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Reconciliation counts what a reconciler pass repaired.
type Reconciliation struct {
	// Scheduled: withdrawals due within the horizon that Redis did not hold
	// (lost in a failover, or a schedule that failed after the ledger write).
	Scheduled int `json:"scheduled"`
	// Promoted: of those, ones that were beyond the horizon until now.
	Promoted int `json:"promoted"`
	// Redispatched: attempts past their deadline whose job Redis lost.
	Redispatched int `json:"redispatched"`
	// Renotified: outcomes finance may not have heard of, whose job is gone.
	Renotified int `json:"renotified"`
}

// Total is the number of repairs.
func (r Reconciliation) Total() int { return r.Scheduled + r.Redispatched + r.Renotified }

// Reconcile makes one pass: every withdrawal the ledger says is on its way
// (scheduled or retrying and due within the horizon, processing past its
// deadline, or paid/failed and not yet reported to finance) must have a job in
// Redis; those without one get it back. It reads the sparse by_state index,
// so its work is bounded by what is outstanding, not by history.
func (d *Dynamo) Reconcile(ctx context.Context, now time.Time) (Reconciliation, error) {
	var rep Reconciliation
	horizon := now.Add(d.opts.Horizon)
	var errs []error
	for _, key := range []string{string(withdrawal.Scheduled), string(withdrawal.Retrying)} {
		// Held means due by the record's time: a job left later than it (a
		// reschedule earlier whose process died before its Redis write)
		// is brought forward.
		err := d.scan(ctx, key, horizon, true, func(w withdrawal.Withdrawal, queued bool) error {
			if queued || (!w.DueAt.After(now) && w.DueAt.After(now.Add(-d.opts.Grace))) {
				return nil // held, or due a moment ago and likely in the work queue
			}
			if err := d.q.AddNoLater(ctx, w.Shard, w.ID, w.DueAt); err != nil {
				return err
			}
			rep.Scheduled++
			if w.DueAt.After(w.CreatedAt.Add(d.opts.Horizon)) {
				rep.Promoted++ // it was beyond the horizon when made
			}
			return nil
		})
		errs = append(errs, err)
	}
	// Far-future due times bound neither: scan everything in these states.
	far := now.Add(100 * 365 * 24 * time.Hour)
	errs = append(errs, d.scan(ctx, string(withdrawal.Processing), far, false, func(w withdrawal.Withdrawal, queued bool) error {
		if queued || w.ProcessingUntil.After(now) {
			return nil // its attempt may still be running
		}
		rep.Redispatched++
		return d.q.Add(ctx, w.Shard, w.ID, now)
	}))
	errs = append(errs, d.scan(ctx, unnotified, far, false, func(w withdrawal.Withdrawal, queued bool) error {
		if queued || w.ProcessedAt.After(now.Add(-d.opts.Grace)) {
			return nil
		}
		rep.Renotified++
		return d.q.Add(ctx, w.Shard, w.ID, now)
	}))
	if rep.Total() > 0 {
		d.log.Warn("reconciler repaired withdrawals", "scheduled", rep.Scheduled, "promoted", rep.Promoted,
			"redispatched", rep.Redispatched, "renotified", rep.Renotified)
	}
	return rep, errors.Join(errs...)
}

// scan walks the by_state index for key with due_at <= until, page by page,
// telling fn for each withdrawal whether Redis holds its job (leased, or
// due: with byDue, due no later than the record).
func (d *Dynamo) scan(ctx context.Context, key string, until time.Time, byDue bool, fn func(w withdrawal.Withdrawal, queued bool) error) error {
	var start map[string]types.AttributeValue
	for {
		out, err := d.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &d.tables.Withdrawals, IndexName: aws.String(IndexByState),
			KeyConditionExpression:    aws.String("state_key = :k AND due_at <= :until"),
			ExpressionAttributeValues: item{":k": s(key), ":until": ms(until)},
			ExclusiveStartKey:         start, Limit: aws.Int32(200),
		})
		if err != nil {
			return fmt.Errorf("ledger: reconcile %s: %w", key, err)
		}
		ws := make([]withdrawal.Withdrawal, 0, len(out.Items))
		for _, it := range out.Items {
			w, err := decodeWithdrawal(it)
			if err != nil {
				return err
			}
			ws = append(ws, w)
		}
		queued, err := d.queued(ctx, ws, byDue)
		if err != nil {
			return err
		}
		for i, w := range ws {
			if err := fn(w, queued[i]); err != nil {
				return fmt.Errorf("ledger: reconcile %s: %w", w.ID, err)
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		start = out.LastEvaluatedKey
	}
}

// queued reports which withdrawals have a job in Redis, leased or due (with
// byDue, due no later than the record).
func (d *Dynamo) queued(ctx context.Context, ws []withdrawal.Withdrawal, byDue bool) ([]bool, error) {
	refs := make([]delayq.Ref, len(ws))
	var by []time.Time
	if byDue {
		by = make([]time.Time, len(ws))
	}
	for i, w := range ws {
		refs[i] = delayq.Ref{Shard: w.Shard, ID: w.ID}
		if byDue {
			by[i] = w.DueAt
		}
	}
	return d.q.HoldsBy(ctx, refs, by)
}

// Outstanding runs fn over every withdrawal on its way (scheduled, retrying
// or processing), from the sparse by_state index: what `hourglass payouts
// unresolved` looks through.
func (d *Dynamo) Outstanding(ctx context.Context, fn func(withdrawal.Withdrawal) error) error {
	far := time.Now().Add(100 * 365 * 24 * time.Hour)
	for _, key := range []withdrawal.Status{withdrawal.Scheduled, withdrawal.Retrying, withdrawal.Processing} {
		err := d.scan(ctx, string(key), far, false, func(w withdrawal.Withdrawal, _ bool) error { return fn(w) })
		if err != nil {
			return err
		}
	}
	return nil
}
