package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/ledger/ledgertest"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func newQueue(t *testing.T, b redistest.Backend, shards int) *delayq.Queue {
	t.Helper()
	q, err := delayq.New(b.Client, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestRedisLedgerConformance(t *testing.T) {
	redistest.Each(t, func(t *testing.T, rb redistest.Backend) {
		ledgertest.Run(t, func(t *testing.T) ledgertest.Backend {
			if err := rb.Client.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			// A client of its own with a switch that loses answers.
			sw := &lostreply.Switch{}
			c := redis.NewClient(rb.Client.Options())
			t.Cleanup(func() { _ = c.Close() })
			c.AddHook(sw.Hook())
			q, err := delayq.New(c, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 4})
			if err != nil {
				t.Fatal(err)
			}
			return ledgertest.Backend{Ledger: ledger.NewRedis(c, q), Queue: q, Lose: sw}
		})
	})
}

func TestPurgeExpiredKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, rb redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, rb, 2)
		l := ledger.NewRedis(rb.Client, q)
		t0 := ledgertest.T0
		for i, user := range []string{"alice", "bob", "carol"} {
			key := withdrawal.IdemKey{UserID: user, Key: "k", Shard: q.ShardFor(user)}
			_, err := l.Reserve(ctx, withdrawal.Reservation{Key: key, Fingerprint: "fp", ID: "wd_x", Now: t0,
				LockUntil: t0.Add(time.Second), ExpiresAt: t0.Add(time.Duration(i+1) * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
		}
		n, err := l.PurgeExpiredKeys(ctx, t0.Add(2*time.Hour))
		if err != nil || n != 2 {
			t.Fatalf("purged %d (%v), want 2", n, err)
		}
		left := 0
		for n := range q.Shards() {
			left += int(rb.Client.HLen(ctx, q.Keys(n).Key("idem")).Val())
		}
		if left != 1 {
			t.Fatalf("idempotency entries left: %d, want 1", left)
		}
		if n, _ := l.PurgeExpiredKeys(ctx, t0.Add(2*time.Hour)); n != 0 {
			t.Fatalf("second purge removed %d", n)
		}
	})
}

// TestCreatedTimeIsKept: a record leaves its creation time out when its id
// tells it (a ULID of it), and keeps it when the id does not.
func TestCreatedTimeIsKept(t *testing.T) {
	redistest.Each(t, func(t *testing.T, rb redistest.Backend) {
		ctx := context.Background()
		q := newQueue(t, rb, 1)
		l := ledger.NewRedis(rb.Client, q)
		for _, w := range []withdrawal.Withdrawal{
			ledgertest.NewWithdrawal(q, "alice", ledgertest.T0.Add(time.Hour)),
			func() withdrawal.Withdrawal { // a reservation taken over: an older id
				w := ledgertest.NewWithdrawal(q, "alice", ledgertest.T0.Add(time.Hour))
				w.ID = withdrawal.NewID(ledgertest.T0.Add(-time.Minute))
				return w
			}(),
			func() withdrawal.Withdrawal { // not a ULID
				w := ledgertest.NewWithdrawal(q, "alice", ledgertest.T0.Add(time.Hour))
				w.ID = "wd_not-a-ulid"
				return w
			}(),
		} {
			ledgertest.Create(t, l, w)
			got, err := l.Get(ctx, "alice", w.ID)
			if err != nil || !got.CreatedAt.Equal(w.CreatedAt) || !got.UpdatedAt.Equal(w.CreatedAt) {
				t.Errorf("%s: created %v, updated %v (%v), want %v", w.ID, got.CreatedAt, got.UpdatedAt, err, w.CreatedAt)
			}
		}
	})
}
