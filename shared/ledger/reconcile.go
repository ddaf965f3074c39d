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

// Reconciliation counts what a reconciler pass did.
type Reconciliation struct {
	// Scheduled: withdrawals due within the horizon that Redis should have
	// held and did not (lost in a failover, or a schedule that failed after
	// the ledger write): repairs.
	Scheduled int `json:"scheduled"`
	// Promoted: withdrawals the ledger alone held (due beyond the horizon
	// when created or rescheduled) handed to Redis ahead of their time.
	// That is the normal course of a long delay, not a repair: it is not in
	// Total, and is emitted as its own metric.
	Promoted int `json:"promoted"`
	// Redispatched: attempts past their deadline whose job Redis lost.
	Redispatched int `json:"redispatched"`
	// Renotified: outcomes finance may not have heard of, whose job is gone.
	Renotified int `json:"renotified"`
}

// Total is the number of repairs (what alarms); promotions are not repairs.
func (r Reconciliation) Total() int { return r.Scheduled + r.Redispatched + r.Renotified }

// Reconcile makes one pass: every withdrawal the ledger says is on its way
// (scheduled or retrying and due within the horizon, processing past its
// deadline, or paid/failed and not yet reported to finance) must have a job in
// Redis; those without one get it back. It reads the sparse by_state index,
// so its work is bounded by what is outstanding, not by history.
//
// A withdrawal due beyond the horizon is promoted by the first pass at or
// after due - horizon, at most one reconcile interval later: a horizon of at
// least two intervals (config refuses less) promotes it at least one interval
// ahead, so that a promotion that fails is retried by the next pass in time.
func (d *Dynamo) Reconcile(ctx context.Context, now time.Time) (Reconciliation, error) {
	var rep Reconciliation
	horizon := now.Add(d.opts.Horizon)
	var errs []error
	for _, key := range []string{string(withdrawal.Scheduled), string(withdrawal.Retrying)} {
		// Held means due by the record's time: a job left later than it (a
		// reschedule earlier whose process died before its Redis write)
		// is brought forward.
		err := d.scan(ctx, key, horizon, true, func(w withdrawal.Withdrawal, queued, deferred bool) error {
			switch {
			case queued:
				return nil
			case !deferred && !w.DueAt.After(now) && w.DueAt.After(now.Add(-d.opts.Grace)):
				// Due a moment ago and likely in the work queue (SQS holds it,
				// not Redis). A deferred record was never handed to Redis, so
				// nothing can hold it: it gets no grace.
				return nil
			}
			if err := d.q.AddNoLater(ctx, w.Shard, w.ID, w.DueAt); err != nil {
				return err
			}
			if !deferred {
				rep.Scheduled++
				return nil
			}
			rep.Promoted++
			d.promoted(ctx, w)
			return nil
		})
		errs = append(errs, err)
	}
	// Far-future due times bound neither: scan everything in these states.
	far := now.Add(100 * 365 * 24 * time.Hour)
	errs = append(errs, d.scan(ctx, string(withdrawal.Processing), far, false, func(w withdrawal.Withdrawal, queued, _ bool) error {
		// Its attempt may still be running; past its deadline its watch job
		// (or the takeover's message) may be in the work queue.
		if queued || w.ProcessingUntil.After(now.Add(-d.opts.Grace)) {
			return nil
		}
		rep.Redispatched++
		return d.q.Add(ctx, w.Shard, w.ID, now)
	}))
	errs = append(errs, d.scan(ctx, unnotified, far, false, func(w withdrawal.Withdrawal, queued, _ bool) error {
		if queued || w.ProcessedAt.After(now.Add(-d.opts.Grace)) {
			return nil
		}
		rep.Renotified++
		return d.q.Add(ctx, w.Shard, w.ID, now)
	}))
	if rep.Total() > 0 {
		d.log.Warn("reconciler repaired withdrawals", "scheduled", rep.Scheduled, "promoted", rep.Promoted,
			"redispatched", rep.Redispatched, "renotified", rep.Renotified)
	} else if rep.Promoted > 0 {
		d.log.Debug("reconciler promoted withdrawals", "promoted", rep.Promoted)
	}
	return rep, errors.Join(errs...)
}

// deferredAttr marks where a scheduled or retrying withdrawal's schedule
// is kept: true while the ledger alone holds it (created or rescheduled
// due beyond the horizon, not promoted yet), false once Redis was asked to
// hold it. A record written before it was kept has neither (see deferred).
const deferredAttr = "ledger_only"

func boolean(v bool) types.AttributeValue { return &types.AttributeValueMemberBOOL{Value: v} }

// deferred reports whether the record it (decoded as w) was never handed
// to Redis since its due time was last set. A record without the flag was
// written before it was kept: its due time was last set by its create, or
// by a reschedule if one was made (a retry always schedules in Redis), and
// was deferred if it lay beyond the horizon then. That test is exact only
// while the horizon is unchanged, hence the flag.
func (d *Dynamo) deferred(it item, w withdrawal.Withdrawal) bool {
	if v, ok := it[deferredAttr].(*types.AttributeValueMemberBOOL); ok {
		return v.Value
	}
	set := w.CreatedAt
	if !w.RescheduledAt.IsZero() {
		set = w.RescheduledAt
	}
	return w.Status == withdrawal.Scheduled && w.DueAt.After(set.Add(d.opts.Horizon))
}

// beyond reports whether a withdrawal due at due, scheduled at now, waits
// in the ledger alone until the reconciler promotes it.
func (d *Dynamo) beyond(due, now time.Time) bool { return due.After(now.Add(d.opts.Horizon)) }

// promoted records that w's job is in Redis now, once the job is there (a
// pass that dies between the two leaves the flag, and the next pass finds
// the job held). The write is conditional on the op read, so a record
// moved meanwhile keeps the flag its own write set. It stamps neither op
// nor revision: the flag tells where the schedule is kept, not what the
// record is, and a client's If-Match on the revision it read must hold.
func (d *Dynamo) promoted(ctx context.Context, w withdrawal.Withdrawal) {
	vals := item{":f": boolean(false)}
	_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &d.tables.Withdrawals, Key: item{"id": s(w.ID)},
		UpdateExpression:          aws.String("SET " + deferredAttr + " = :f"),
		ConditionExpression:       aws.String(unchanged(w, vals)),
		ExpressionAttributeValues: vals,
	})
	if err != nil && !conditionFailed(err) {
		// The job is in Redis: while it is held no pass looks at the flag.
		d.log.Warn("withdrawal promoted into Redis, not marked so in the ledger", "withdrawal_id", w.ID,
			"error", err.Error())
	}
}

// scan walks the by_state index for state with due_at <= until, every
// shard of it (stateKeys), page by page, telling fn for each withdrawal
// whether Redis holds its job (leased, or due: with byDue, due no later
// than the record), and whether it was never handed to Redis (deferred
// beyond the horizon). Each shard is in due order, the whole is not.
func (d *Dynamo) scan(ctx context.Context, state string, until time.Time, byDue bool,
	fn func(w withdrawal.Withdrawal, queued, deferred bool) error) error {
	// A shard that fails does not keep the others from their repairs.
	var errs []error
	for _, key := range stateKeys(state) {
		errs = append(errs, d.scanKey(ctx, key, until, byDue, fn))
	}
	return errors.Join(errs...)
}

// scanKey is scan over one by_state key.
func (d *Dynamo) scanKey(ctx context.Context, key string, until time.Time, byDue bool,
	fn func(w withdrawal.Withdrawal, queued, deferred bool) error) error {
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
		deferred := make([]bool, 0, len(out.Items))
		for _, it := range out.Items {
			w, err := decodeWithdrawal(it)
			if err != nil {
				return err
			}
			ws = append(ws, w)
			deferred = append(deferred, d.deferred(it, w))
		}
		queued, err := d.queued(ctx, ws, byDue)
		if err != nil {
			return err
		}
		for i, w := range ws {
			if err := fn(w, queued[i], deferred[i]); err != nil {
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
		err := d.scan(ctx, string(key), far, false, func(w withdrawal.Withdrawal, _, _ bool) error { return fn(w) })
		if err != nil {
			return err
		}
	}
	return nil
}
