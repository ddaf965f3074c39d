package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/httpapi"
)

// stackGrace is HOURGLASS_RECONCILE_GRACE as the stack sets it: the work
// queue's visibility timeout (180 s) x its maxReceiveCount (5) + the
// consumer's batch window (0); infra's TestReconcileGraceIsTheWorkQueuesRedelivery
// checks the stack against its template.
const stackGrace = 15 * time.Minute

// TestReconcilerLeavesTheWorkQueueItsGrace: with the grace the stack sets,
// a withdrawal whose job the poller handed to SQS (and acked in Redis) is
// not put back while SQS may still deliver it: waiting for a consumer, or
// redelivered after failed receives (the first at 180 s, the fifth and
// last at 720 s, its visibility running out at 900 s). Past the grace it
// is put back, once, as a repair. With the grace at the reconcile interval
// (2m, as before), the job of a message retried once was repaired.
func TestReconcilerLeavesTheWorkQueueItsGrace(t *testing.T) {
	for _, ledgerName := range []string{"redis", "dynamodb"} {
		t.Run(ledgerName, func(t *testing.T) {
			ctx := context.Background()
			rs := redistest.Start(t)
			t.Setenv("REDIS_URL", rs.URL())
			t.Setenv("HOURGLASS_LEDGER", ledgerName)
			t.Setenv("HOURGLASS_RECONCILE_GRACE", stackGrace.String())
			if ledgerName == "dynamodb" {
				db := dynalitetest.Start(t)
				t.Setenv("DYNAMODB_ENDPOINT", db.Endpoint)
				dynTables(t)
			}
			a := appFromEnv(t, config.Lambda)
			if err := a.CreateTables(ctx); err != nil {
				t.Fatal(err)
			}
			c, err := httpapi.CreateWithdrawal(ctx, a.Service, "alice", "k1",
				[]byte(`{"amount":"10.00","currency":"USD","destination":"bank_1","delay_seconds":0}`))
			if err != nil {
				t.Fatal(err)
			}
			sent := &capture{}
			p, err := a.Poller(sent, true)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Round(ctx); err != nil {
				t.Fatal(err)
			}
			if jobs := sent.take(); len(jobs) != 1 || jobs[0].ID != c.ID {
				t.Fatalf("dispatched %+v, want %s's job", jobs, c.ID)
			}
			held := func() bool {
				t.Helper()
				_, ok, err := a.Withdrawals.DueAt(ctx, c.Shard, c.ID)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			}
			if held() {
				t.Fatal("the job is still in Redis after SQS took it")
			}
			for _, d := range []time.Duration{0, 2*time.Minute + time.Second, 3*time.Minute + time.Second, 12*time.Minute + time.Second,
				stackGrace - time.Millisecond} {
				rec, _, err := a.Reconcile(ctx, c.DueAt.Add(d))
				if err != nil || rec.Total() != 0 || held() {
					t.Fatalf("pass %v after due, the job in SQS: %+v %v (in Redis: %v), want nothing done", d, rec, err, held())
				}
			}
			rec, _, err := a.Reconcile(ctx, c.DueAt.Add(stackGrace+time.Millisecond))
			if err != nil || rec.Scheduled != 1 || rec.Total() != 1 || !held() {
				t.Fatalf("pass past the grace: %+v %v (in Redis: %v), want the job put back", rec, err, held())
			}
		})
	}
}
