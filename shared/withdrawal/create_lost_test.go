package withdrawal_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// lostCreate is a ledger whose Create lands and answers ErrExists (its
// first answer was lost and the resend found the record), and whose next
// key read then fails.
type lostCreate struct {
	withdrawal.Ledger
	reserves atomic.Int32
}

var errStoreDown = errors.New("ledger: connection reset")

func (l *lostCreate) Reserve(ctx context.Context, r withdrawal.Reservation) (withdrawal.KeyState, error) {
	if l.reserves.Add(1) > 1 {
		return withdrawal.KeyState{}, errStoreDown
	}
	return l.Ledger.Reserve(ctx, r)
}

func (l *lostCreate) Create(ctx context.Context, w withdrawal.Withdrawal, key withdrawal.IdemKey, resp []byte) error {
	if err := l.Ledger.Create(ctx, w, key, resp); err != nil {
		return err
	}
	return withdrawal.ErrExists
}

// A create that landed, whose answer was lost and whose follow-up key read
// failed, answers the read's failure (the client retries and gets the first
// answer), never ErrExists; and the retry is that answer. Issue 21 (c01,
// found by the previous session's stall checker).
func TestCreateLandedThenKeyReadFailedIsNotExists(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newEnv(t, b, clock.NewFake(t0))
		lc := &lostCreate{Ledger: e.ledger}
		svc, err := withdrawal.NewService(withdrawal.Config{Ledger: lc, Clock: e.clock, Rules: rules(), ShardFor: e.queue.ShardFor})
		if err != nil {
			t.Fatal(err)
		}
		_, err = httpapi.CreateWithdrawal(ctx, svc, "alice", "k1", []byte(body))
		if errors.Is(err, withdrawal.ErrExists) || !errors.Is(err, errStoreDown) {
			t.Fatalf("create: %v, want the key read's failure, not ErrExists", err)
		}
		replay, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k1", []byte(body))
		if err != nil || !replay.Replayed {
			t.Fatalf("the client's retry: %+v %v, want the first answer replayed", replay, err)
		}
		list, err := e.svc.List(ctx, "alice", 10, "")
		if err != nil || len(list.Items) != 1 || list.Items[0].ID != replay.ID {
			t.Fatalf("alice's withdrawals: %+v %v, want exactly %s", list, err, replay.ID)
		}
	})
}
