package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// lateWrites holds back the next record write to one table: the caller gets
// a timeout, and the write lands when the test says (a request DynamoDB
// applied after its sender gave up).
type lateWrites struct {
	ledger.DynamoAPI
	table string
	mu    sync.Mutex
	hold  bool
	held  []*dynamodb.PutItemInput
}

var errTimedOut = errors.New("operation error DynamoDB: PutItem, request canceled, context deadline exceeded")

func (l *lateWrites) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	l.mu.Lock()
	if l.hold && aws.ToString(in.TableName) == l.table {
		l.hold = false
		l.held = append(l.held, in)
		l.mu.Unlock()
		return nil, errTimedOut
	}
	l.mu.Unlock()
	return l.DynamoAPI.PutItem(ctx, in, opts...)
}

// land applies the held writes, as DynamoDB would have.
func (l *lateWrites) land(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	held := l.held
	l.held = nil
	l.mu.Unlock()
	for _, in := range held {
		if _, err := l.DynamoAPI.PutItem(context.Background(), in); err != nil {
			t.Fatalf("the late write: %v", err)
		}
	}
}

// A create whose record write times out, is released, and lands after the
// client's retry reserved the key again must not make a second withdrawal
// (the reconciler would schedule and pay it). Issue 21, c03: found by the
// stall model checker; here as a fixed interleaving.
func TestDynamoCreateLandingAfterItsReleaseIsTheRetrysRecord(t *testing.T) {
	db := dynalitetest.Start(t)
	rdb := redistest.Start(t).Client(t)
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	tables := freshTables(t, db)
	api := &lateWrites{DynamoAPI: db.Client(), table: tables.Withdrawals}
	l := ledger.NewDynamo(api, tables, q, ledger.DynamoOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	now := ledgertest.T0

	first := ledgertest.NewWithdrawal(q, "alice", now.Add(time.Hour))
	key := withdrawal.IdemKey{UserID: "alice", Key: "k-1", Shard: first.Shard}
	reserve := func(id string, at time.Time) withdrawal.KeyState {
		t.Helper()
		st, err := l.Reserve(ctx, withdrawal.Reservation{Key: key, Fingerprint: "fp", ID: id, Now: at,
			LockUntil: at.Add(30 * time.Second), ExpiresAt: at.Add(24 * time.Hour)})
		if err != nil || st.Phase != withdrawal.KeyAcquired {
			t.Fatalf("reserve %s: %+v %v", id, st, err)
		}
		return st
	}
	reserve(first.ID, now)
	api.mu.Lock()
	api.hold = true
	api.mu.Unlock()
	if err := l.Create(ctx, first, key, []byte(`{"id":"`+first.ID+`"}`)); err == nil {
		t.Fatal("the create whose write timed out reported success")
	}
	// The service gives the key back so the client may retry at once.
	if err := l.Release(ctx, key, first.ID, true); err != nil {
		t.Fatal(err)
	}

	// The client retries a second later with the same key and body.
	later := now.Add(time.Second)
	retry := ledgertest.NewWithdrawal(q, "alice", now.Add(time.Hour))
	st := reserve(retry.ID, later)
	api.land(t) // the first write lands now
	if st.ID != first.ID {
		t.Fatalf("the retry reserved the key for a new withdrawal %s; the first create's write %s may still land",
			st.ID, first.ID)
	}
	retry.ID = st.ID
	if err := l.Create(ctx, retry, key, []byte(`{"id":"`+retry.ID+`"}`)); err != nil {
		t.Fatalf("the retry's create: %v", err)
	}
	got, err := l.List(ctx, "alice", 10, "")
	if err != nil || len(got) != 1 || got[0].ID != first.ID {
		t.Fatalf("alice's withdrawals after one create retried: %d %v, want exactly %s", len(got), err, first.ID)
	}
}
