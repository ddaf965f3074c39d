package ledger_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// The reconciler's timing in these tests: a pass every interval, as the
// poller runs it, with the grace the app gives it (one interval) and the
// shortest horizon config accepts.
const (
	interval = 2 * time.Minute
	horizon  = config.MinHorizonIntervals * interval
)

type promoteEnv struct {
	t      *testing.T
	db     *dynamodb.Client
	tables ledger.Tables
	q      *delayq.Queue
	l      *ledger.Dynamo
	clk    *clock.Fake
}

// newPromoteEnv empties Redis and makes fresh tables.
func newPromoteEnv(t *testing.T, db *dynalitetest.Server, rdb *redis.Client) *promoteEnv {
	t.Helper()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	tables := freshTables(t, db)
	l := ledger.NewDynamo(db.Client(), tables, q, ledger.DynamoOptions{
		Horizon: horizon, Grace: interval, Logger: slog.New(slog.DiscardHandler),
	})
	return &promoteEnv{t: t, db: db.Client(), tables: tables, q: q, l: l, clk: clock.NewFake(ledgertest.T0)}
}

// create makes a withdrawal of user due at due, at T0.
func (e *promoteEnv) create(user string, due time.Time) withdrawal.Withdrawal {
	e.t.Helper()
	w := ledgertest.NewWithdrawal(e.q, user, due)
	ledgertest.Create(e.t, e.l, w)
	return w
}

// pass runs one reconciler pass at the clock's time.
func (e *promoteEnv) pass() ledger.Reconciliation {
	e.t.Helper()
	rep, err := e.l.Reconcile(context.Background(), e.clk.Now())
	if err != nil {
		e.t.Fatalf("reconcile at %v: %v", e.clk.Now(), err)
	}
	return rep
}

// jobDue is the due time of w's job in Redis, if it has one waiting.
func (e *promoteEnv) jobDue(w withdrawal.Withdrawal) (time.Time, bool) {
	e.t.Helper()
	at, ok, err := e.q.DueAt(context.Background(), w.Shard, w.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return at, ok
}

// handOver claims w's job at the clock's time and acks it, as the poller
// does once SQS accepted it: the job is in the work queue, not Redis.
func (e *promoteEnv) handOver(w withdrawal.Withdrawal) {
	e.t.Helper()
	ctx := context.Background()
	c, err := e.q.Claim(ctx, w.Shard, e.clk.Now(), time.Minute, 10)
	if err != nil || len(c.Jobs) != 1 || c.Jobs[0].ID != w.ID {
		e.t.Fatalf("claim %s at %v: %+v %v", w.ID, e.clk.Now(), c, err)
	}
	if _, err := e.q.Ack(ctx, w.Shard, c.Lease, w.ID); err != nil {
		e.t.Fatal(err)
	}
}

// forgetDeferral rewrites w's record in the layout from before the
// deferred flag was kept.
func (e *promoteEnv) forgetDeferral(w withdrawal.Withdrawal) {
	e.t.Helper()
	_, err := e.db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &e.tables.Withdrawals, Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: w.ID}},
		UpdateExpression: aws.String("REMOVE ledger_only"),
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *promoteEnv) find(w withdrawal.Withdrawal) withdrawal.Withdrawal {
	e.t.Helper()
	got, err := e.l.Find(context.Background(), w.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// TestDynamoPromotesAnIntervalAhead: a withdrawal created due just beyond
// the horizon is promoted into Redis, at its exact due time, by a pass at
// least one reconcile interval before it is due, whatever the phase of the
// passes against its creation; the promotion is counted as such and not as
// a repair (Total, what alarms), and leaves the record's revision alone.
func TestDynamoPromotesAnIntervalAhead(t *testing.T) {
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	for _, phase := range []time.Duration{0, time.Millisecond, interval / 2, interval - time.Millisecond} {
		t.Run(fmt.Sprintf("passes at +%v", phase), func(t *testing.T) {
			e := newPromoteEnv(t, db, rdb)
			w := e.create("alice", ledgertest.T0.Add(horizon+time.Millisecond))
			if _, held := e.jobDue(w); held {
				t.Fatal("a withdrawal due beyond the horizon is in Redis at its create")
			}
			rev := e.find(w).Revision
			var promotedAt time.Time
			for e.clk.Set(ledgertest.T0.Add(phase)); !e.clk.Now().After(w.DueAt); e.clk.Advance(interval) {
				rep := e.pass()
				if rep.Total() != 0 {
					t.Fatalf("pass at %v: %+v counts the promotion as a repair", e.clk.Now(), rep)
				}
				if rep.Promoted == 0 {
					continue
				}
				if rep != (ledger.Reconciliation{Promoted: 1}) || !promotedAt.IsZero() {
					t.Fatalf("pass at %v: %+v, promoted before at %v; want one promotion, once", e.clk.Now(), rep, promotedAt)
				}
				promotedAt = e.clk.Now()
			}
			if promotedAt.IsZero() {
				t.Fatal("never promoted")
			}
			if lead := w.DueAt.Sub(promotedAt); lead < interval {
				t.Fatalf("promoted at %v, %v before due at %v; want at least one interval (%v)", promotedAt, lead, w.DueAt, interval)
			}
			if at, held := e.jobDue(w); !held || !at.Equal(w.DueAt) {
				t.Fatalf("job due %v (held %v), want %v", at, held, w.DueAt)
			}
			if got := e.find(w).Revision; got != rev {
				t.Fatalf("revision %d after the promotion, want %d: a client's If-Match must still hold", got, rev)
			}
		})
	}
	if got := (ledger.Reconciliation{Scheduled: 1, Promoted: 5, Redispatched: 2, Renotified: 3}).Total(); got != 6 {
		t.Fatalf("Total %d, want 6 repairs (promotions are not repairs)", got)
	}
}

// TestDynamoGraceIsForQueuedJobsOnly: the reconciler leaves a job due a
// moment ago alone for a grace, as it may sit in the work queue. A record
// never handed to Redis (created or rescheduled beyond the horizon, not
// promoted: the reconciler did not run in time) cannot be there, and is
// scheduled at once, in the current layout and in the one from before the
// deferred flag; one that was queued is still left alone (no double work).
func TestDynamoGraceIsForQueuedJobsOnly(t *testing.T) {
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	t0 := ledgertest.T0
	withinGrace := 10 * time.Second

	neverQueued := []struct {
		name string
		make func(e *promoteEnv) withdrawal.Withdrawal
	}{
		{"created beyond the horizon", func(e *promoteEnv) withdrawal.Withdrawal {
			return e.create("alice", t0.Add(horizon+30*time.Second))
		}},
		{"created beyond the horizon, written before the flag", func(e *promoteEnv) withdrawal.Withdrawal {
			w := e.create("alice", t0.Add(horizon+30*time.Second))
			e.forgetDeferral(w)
			return w
		}},
		{"rescheduled beyond the horizon", func(e *promoteEnv) withdrawal.Withdrawal {
			w := e.create("alice", t0.Add(time.Minute))
			w, err := e.l.Reschedule(ctx, withdrawal.Reschedule{UserID: "alice", ID: w.ID, DueAt: t0.Add(horizon + time.Minute),
				Now: t0, By: "user"})
			if err != nil {
				e.t.Fatal(err)
			}
			if _, held := e.jobDue(w); held {
				e.t.Fatal("a withdrawal rescheduled beyond the horizon is in Redis")
			}
			return w
		}},
	}
	for _, tc := range neverQueued {
		t.Run("never queued: "+tc.name, func(t *testing.T) {
			e := newPromoteEnv(t, db, rdb)
			w := tc.make(e)
			e.clk.Set(w.DueAt.Add(withinGrace))
			if rep := e.pass(); rep != (ledger.Reconciliation{Promoted: 1}) {
				e.t.Fatalf("pass %v after due: %+v, want it promoted", withinGrace, rep)
			}
			if at, held := e.jobDue(w); !held || !at.Equal(w.DueAt) {
				e.t.Fatalf("job due %v (held %v), want %v", at, held, w.DueAt)
			}
			if rep := e.pass(); rep != (ledger.Reconciliation{}) {
				e.t.Fatalf("second pass: %+v, want nothing", rep)
			}
		})
	}

	queued := []struct {
		name string
		make func(e *promoteEnv) withdrawal.Withdrawal
	}{
		{"created within the horizon", func(e *promoteEnv) withdrawal.Withdrawal {
			return e.create("bob", t0.Add(time.Minute))
		}},
		{"promoted", func(e *promoteEnv) withdrawal.Withdrawal {
			w := e.create("bob", t0.Add(horizon+30*time.Second))
			e.clk.Set(w.DueAt.Add(-interval))
			if rep := e.pass(); rep != (ledger.Reconciliation{Promoted: 1}) {
				e.t.Fatalf("promoting pass: %+v", rep)
			}
			return w
		}},
		{"promoted, written before the flag", func(e *promoteEnv) withdrawal.Withdrawal {
			w := e.create("bob", t0.Add(horizon+30*time.Second))
			e.forgetDeferral(w)
			e.clk.Set(w.DueAt.Add(-interval))
			if rep := e.pass(); rep != (ledger.Reconciliation{Promoted: 1}) {
				e.t.Fatalf("promoting pass: %+v", rep)
			}
			return w
		}},
		{"created beyond the horizon, rescheduled into it", func(e *promoteEnv) withdrawal.Withdrawal {
			// Due far later than its create plus the horizon: a test on the
			// times alone would take it for never queued.
			w := e.create("bob", t0.Add(72*time.Hour))
			now := t0.Add(48 * time.Hour)
			w, err := e.l.Reschedule(ctx, withdrawal.Reschedule{UserID: "bob", ID: w.ID, DueAt: now.Add(time.Minute),
				Now: now, By: "user"})
			if err != nil {
				e.t.Fatal(err)
			}
			return w
		}},
	}
	for _, tc := range queued {
		t.Run("queued: "+tc.name, func(t *testing.T) {
			e := newPromoteEnv(t, db, rdb)
			w := tc.make(e)
			e.clk.Set(w.DueAt)
			e.handOver(w)
			e.clk.Set(w.DueAt.Add(withinGrace))
			if rep := e.pass(); rep != (ledger.Reconciliation{}) {
				t.Fatalf("pass %v after due, its job in the work queue: %+v, want nothing", withinGrace, rep)
			}
			if _, held := e.jobDue(w); held {
				t.Fatal("a job in the work queue was scheduled again")
			}
			// Past the grace, the job is taken for lost: a repair.
			e.clk.Set(w.DueAt.Add(interval + time.Millisecond))
			if rep := e.pass(); rep != (ledger.Reconciliation{Scheduled: 1}) {
				t.Fatalf("pass past the grace: %+v, want one repair", rep)
			}
		})
	}
}
