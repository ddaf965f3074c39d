package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// replayRules are SPEC.md's default request rules.
var replayRules = withdrawal.Rules{
	Currencies:   []string{"CNY", "USD", "EUR", "JPY"},
	MaxAmount:    decimal.RequireFromString("1000000"),
	DefaultDelay: 30 * time.Minute,
	MaxDelay:     30 * 24 * time.Hour,
}

// processAt is a create body due at at.
func processAt(at time.Time) withdrawal.Request {
	return withdrawal.Request{Amount: decimal.RequireFromString("125.50"), Currency: "CNY", Destination: "bank_6222",
		When: withdrawal.When{At: at}}
}

// answer is what a create answered: the withdrawal as created, its tag,
// whether it was a replay.
func answer(t *testing.T, c withdrawal.Created) string {
	t.Helper()
	b, err := withdrawal.EncodeCreated(c.Withdrawal)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %s replayed=%v", b, c.ETag(), c.Replayed)
}

// testReplayBeforeTheClock: the withdrawal service over the backend answers a
// replay before it judges the body against the clock. A create due 2 s ahead
// whose answer was lost and which is sent again 3 s later is the first
// answer again, not "process_at must not be in the past": that 400 would
// tell the client nothing was stored, and its retry under a new key would be
// paid twice.
func testReplayBeforeTheClock(t *testing.T, b Backend) {
	ctx := context.Background()
	clk := clock.NewFake(T0)
	svc, err := withdrawal.NewService(withdrawal.Config{Ledger: b.Ledger, Clock: clk, Rules: replayRules, ShardFor: b.Queue.ShardFor})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("process_at passed since the first request", func(t *testing.T) {
		clk.Set(T0)
		body := processAt(T0.Add(2 * time.Second))
		first, err := svc.Create(ctx, "alice", "late-replay", body)
		if err != nil || first.Replayed {
			t.Fatalf("create: %+v %v", first, err)
		}
		clk.Advance(3 * time.Second)
		again, err := svc.Create(ctx, "alice", "late-replay", body)
		if err != nil {
			t.Fatalf("replay 3 s later: %v, want the first answer", err)
		}
		want := first
		want.Replayed = true
		if diff := cmp.Diff(answer(t, want), answer(t, again)); diff != "" {
			t.Errorf("replay (-want +got):\n%s", diff)
		}
		items, err := b.Ledger.List(ctx, "alice", 10, "")
		if err != nil || len(items) != 1 || items[0].ID != first.ID {
			t.Fatalf("alice has %d withdrawals (%v), want only %s", len(items), err, first.ID)
		}
		if ids := due(t, b.Queue); !cmp.Equal(ids, []string{first.ID}) {
			t.Errorf("queued %v, want only %s", ids, first.ID)
		}
	})

	t.Run("process_at too far ahead on a clock behind the first", func(t *testing.T) {
		clk.Set(T0)
		body := processAt(T0.Add(replayRules.MaxDelay))
		first, err := svc.Create(ctx, "bob", "edge", body)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		clk.Set(T0.Add(-time.Second)) // another container, its clock a second behind
		again, err := svc.Create(ctx, "bob", "edge", body)
		want := first
		want.Replayed = true
		if err != nil || answer(t, again) != answer(t, want) {
			t.Fatalf("replay: %+v %v, want the first answer", again, err)
		}
	})

	t.Run("in flight while process_at passed", func(t *testing.T) {
		clk.Set(T0)
		body := processAt(T0.Add(2 * time.Second))
		// The first request holds the key and has not finished.
		key := withdrawal.IdemKey{UserID: "carol", Key: "slow", Shard: b.Queue.ShardFor("carol")}
		if st, err := b.Ledger.Reserve(ctx, reservation(key, body.Fingerprint(), withdrawal.NewID(T0), T0)); err != nil ||
			st.Phase != withdrawal.KeyAcquired {
			t.Fatalf("reserve: %+v %v", st, err)
		}
		clk.Advance(3 * time.Second)
		if _, err := svc.Create(ctx, "carol", "slow", body); !errors.Is(err, withdrawal.ErrIdempotencyInFlight) {
			t.Fatalf("got %v, want ErrIdempotencyInFlight", err)
		}
	})

	t.Run("a new key in the past writes nothing", func(t *testing.T) {
		clk.Set(T0.Add(time.Minute))
		_, err := svc.Create(ctx, "dave", "late-new", processAt(T0))
		var verr *validation.Error
		if !errors.As(err, &verr) || len(verr.Errors) != 1 || verr.Errors[0].Field != "process_at" {
			t.Fatalf("got %v, want process_at must not be in the past", err)
		}
		if items, err := b.Ledger.List(ctx, "dave", 10, ""); err != nil || len(items) != 0 {
			t.Fatalf("dave has %d withdrawals (%v), want none", len(items), err)
		}
		// The key was given back: the corrected request is new under it.
		c, err := svc.Create(ctx, "dave", "late-new", processAt(T0.Add(2*time.Minute)))
		if err != nil || c.Replayed {
			t.Fatalf("corrected request under the refused key: %+v %v", c, err)
		}
	})
}
