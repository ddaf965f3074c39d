package ledger_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestDynamoRescheduleDiesBeforeRedis: the process dies between the
// ledger's conditional write and the Redis schedule (here: its Redis is
// gone). Moved later, the old job fires early and Begin puts it back at the
// record's time; moved earlier, the reconciler brings the job forward to it.
func TestDynamoRescheduleDiesBeforeRedis(t *testing.T) {
	ctx := context.Background()
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = gone.Close() })
	deadQ, err := delayq.New(gone, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	tables := freshTables(t, db)
	quiet := ledger.DynamoOptions{Logger: slog.New(slog.DiscardHandler)}
	live := ledger.NewDynamo(db.Client(), tables, q, quiet)
	dying := ledger.NewDynamo(db.Client(), tables, deadQ, quiet)
	t0 := ledgertest.T0
	dueOf := func(w withdrawal.Withdrawal) time.Time {
		t.Helper()
		at, ok, err := q.DueAt(ctx, w.Shard, w.ID)
		if err != nil || !ok {
			t.Fatalf("%s not scheduled: %v", w.ID, err)
		}
		return at
	}

	// Later: the job stays at the old time.
	later := ledgertest.NewWithdrawal(q, "alice", t0.Add(time.Minute))
	ledgertest.Create(t, live, later)
	newDue := t0.Add(10 * time.Minute)
	if _, err := dying.Reschedule(ctx, withdrawal.Reschedule{UserID: "alice", ID: later.ID, DueAt: newDue, Now: t0, By: "user"}); err != nil {
		t.Fatal(err)
	}
	if at := dueOf(later); !at.Equal(later.DueAt) {
		t.Fatalf("the dying reschedule reached Redis: job due %v", at)
	}
	c, err := q.Claim(ctx, later.Shard, later.DueAt, time.Minute, 10)
	if err != nil || len(c.Jobs) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	_, start, err := live.Begin(ctx, later.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(t0), Now: later.DueAt,
		Until: later.DueAt.Add(time.Minute), Claimed: time.UnixMilli(c.Jobs[0].Due).UTC()})
	if err != nil || start != withdrawal.StartNotDue {
		t.Fatalf("the old job at the old time: %v %v, want not due", start, err)
	}
	if at := dueOf(later); !at.Equal(newDue) {
		t.Fatalf("the old job is back at %v, want the record's %v", at, newDue)
	}

	// Earlier: the job stays later than the record until the reconciler.
	earlier := ledgertest.NewWithdrawal(q, "bob", t0.Add(30*time.Minute))
	ledgertest.Create(t, live, earlier)
	newDue = t0.Add(5 * time.Minute)
	if _, err := dying.Reschedule(ctx, withdrawal.Reschedule{UserID: "bob", ID: earlier.ID, DueAt: newDue, Now: t0, By: "user"}); err != nil {
		t.Fatal(err)
	}
	if at := dueOf(earlier); !at.Equal(earlier.DueAt) {
		t.Fatalf("the dying reschedule reached Redis: job due %v", at)
	}
	rep, err := live.Reconcile(ctx, t0)
	if err != nil || rep.Scheduled != 1 {
		t.Fatalf("reconcile: %+v %v, want the one job brought forward", rep, err)
	}
	if at := dueOf(earlier); !at.Equal(newDue) {
		t.Fatalf("after the reconciler the job is due %v, want %v", at, newDue)
	}
	if rep, err := live.Reconcile(ctx, t0); err != nil || rep.Total() != 0 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
}
