package ledger_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// stateKeyOf is the by_state key of w's record as stored ("" for none).
func (e *promoteEnv) stateKeyOf(w withdrawal.Withdrawal) string {
	e.t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &e.tables.Withdrawals, Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: w.ID}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		e.t.Fatal(err)
	}
	v, _ := out.Item["state_key"].(*types.AttributeValueMemberS)
	if v == nil {
		return ""
	}
	return v.Value
}

// unshard rewrites w's by_state key as a release before the sharding
// wrote it: the state alone.
func (e *promoteEnv) unshard(w withdrawal.Withdrawal) {
	e.t.Helper()
	state, _, ok := strings.Cut(e.stateKeyOf(w), "#")
	if !ok {
		e.t.Fatalf("%s has no sharded key", w.ID)
	}
	_, err := e.db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
		TableName: &e.tables.Withdrawals, Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: w.ID}},
		UpdateExpression:          aws.String("SET state_key = :k"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: state}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// outstanding is what Outstanding lists, by id.
func (e *promoteEnv) outstanding() map[string]bool {
	e.t.Helper()
	seen := map[string]bool{}
	if err := e.l.Outstanding(context.Background(), func(w withdrawal.Withdrawal) error { seen[w.ID] = true; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return seen
}

// TestDynamoStateIndexIsSharded: the by_state index's partition key is
// the state and a shard (one of ledger.StateShards) taken from the id, so
// index writes spread over StateShards keys per state instead of one
// (DynamoDB serves about 1,000 writes a second per key). A withdrawal keeps
// its shard through its states; the reconciler and Outstanding read every
// shard: all 64 withdrawals whose jobs Redis lost are found and put back.
func TestDynamoStateIndexIsSharded(t *testing.T) {
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	e := newPromoteEnv(t, db, rdb)
	const n = 64
	shards := map[string]bool{}
	var ws []withdrawal.Withdrawal
	for i := range n {
		w := e.create(fmt.Sprintf("u%d", i), ledgertest.T0.Add(time.Minute))
		key := e.stateKeyOf(w)
		state, shard, ok := strings.Cut(key, "#")
		if !ok || state != string(withdrawal.Scheduled) {
			t.Fatalf("state_key %q, want scheduled#<shard>", key)
		}
		var k int
		if _, err := fmt.Sscan(shard, &k); err != nil || k < 0 || k >= ledger.StateShards || fmt.Sprint(k) != shard {
			t.Fatalf("state_key %q: shard not in 0..%d", key, ledger.StateShards-1)
		}
		shards[shard] = true
		ws = append(ws, w)
	}
	if len(shards) < ledger.StateShards/2 {
		t.Errorf("%d withdrawals fell in %d of %d shards: the hash does not spread them", n, len(shards), ledger.StateShards)
	}
	// A state change keeps the shard.
	_, shard, _ := strings.Cut(e.stateKeyOf(ws[0]), "#")
	e.clk.Set(ws[0].DueAt)
	if _, start, err := e.l.Begin(context.Background(), ws[0].Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(e.clk.Now()),
		Now: e.clk.Now(), Until: e.clk.Now().Add(30 * time.Second)}); err != nil || start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v %v", start, err)
	}
	if got, want := e.stateKeyOf(ws[0]), string(withdrawal.Processing)+"#"+shard; got != want {
		t.Fatalf("after begin state_key %q, want %q: the shard follows the id", got, want)
	}
	if got := e.outstanding(); len(got) != n {
		t.Fatalf("Outstanding lists %d, want %d", len(got), n)
	}
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(ledgertest.T0.Add(time.Hour))
	if rep := e.pass(); rep.Scheduled != n-1 || rep.Redispatched != 1 || rep.Total() != n {
		t.Fatalf("reconcile after Redis lost every job: %+v, want %d scheduled and 1 redispatched", rep, n-1)
	}
	for _, w := range ws[1:] {
		if _, ok := e.jobDue(w); !ok {
			t.Fatalf("%s not put back", w.ID)
		}
	}
}

// TestDynamoFindsRecordsWrittenBeforeTheShards: records a release before
// the sharding wrote (state_key the state alone) are still found after the
// deploy: the reconciler repairs and promotes them, Outstanding lists
// them, and their next write moves them to their shard. A withdrawal must
// not be lost across a deploy.
func TestDynamoFindsRecordsWrittenBeforeTheShards(t *testing.T) {
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	e := newPromoteEnv(t, db, rdb)
	ctx := context.Background()
	scheduled := e.create("u-scheduled", ledgertest.T0.Add(time.Minute))
	far := e.create("u-far", ledgertest.T0.Add(30*24*time.Hour)) // beyond the horizon: never in Redis
	processing := e.create("u-processing", ledgertest.T0)
	untold := e.create("u-untold", ledgertest.T0)
	e.handOver(processing)
	e.handOver(untold)
	for _, w := range []withdrawal.Withdrawal{processing, untold} {
		a := withdrawal.NewAttemptID(ledgertest.T0)
		if _, _, err := e.l.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: a, Now: ledgertest.T0, Until: ledgertest.T0.Add(30 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		if w.ID == untold.ID {
			if _, err := e.l.Finish(ctx, w.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, At: ledgertest.T0.Add(time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	all := []withdrawal.Withdrawal{scheduled, far, processing, untold}
	for _, w := range all {
		e.unshard(w)
	}
	if got := e.stateKeyOf(untold); got != "unnotified" {
		t.Fatalf("untold's key %q, want the old layout's unnotified", got)
	}
	seen := e.outstanding()
	for _, w := range []withdrawal.Withdrawal{scheduled, far, processing} {
		if !seen[w.ID] {
			t.Errorf("Outstanding misses %s (%s), written before the shards", w.ID, w.UserID)
		}
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Past every grace, and far's due time within the horizon.
	e.clk.Set(far.DueAt.Add(-time.Minute))
	rep := e.pass()
	if want := (ledger.Reconciliation{Scheduled: 1, Promoted: 1, Redispatched: 1, Renotified: 1}); rep != want {
		t.Fatalf("reconcile of records in the old layout: %+v, want %+v", rep, want)
	}
	for _, w := range all {
		if _, ok := e.jobDue(w); !ok {
			t.Errorf("%s (%s) not put back", w.ID, w.UserID)
		}
	}
	// The next write of a record moves it to its shard.
	if _, err := e.l.Cancel(ctx, "u-scheduled", scheduled.ID, e.clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.l.MarkNotified(ctx, untold.Ref(), withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	if k1, k2 := e.stateKeyOf(scheduled), e.stateKeyOf(untold); k1 != "" || k2 != "" {
		t.Errorf("cancelled and told records keep by_state keys %q, %q", k1, k2)
	}
	e.clk.Set(far.DueAt)
	if _, _, err := e.l.Begin(ctx, far.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(e.clk.Now()), Now: e.clk.Now(),
		Until: e.clk.Now().Add(30 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := e.stateKeyOf(far); !strings.HasPrefix(got, string(withdrawal.Processing)+"#") {
		t.Errorf("far's key after its next write %q, want processing#<shard>", got)
	}
}
