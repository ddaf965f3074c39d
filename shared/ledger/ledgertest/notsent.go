package ledgertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// sameRecord fails the test unless the ledger holds w's record exactly as
// before (every field, its revision and last write id too), with its job
// still queued at job (or still without one when job is zero).
func sameRecord(t *testing.T, b Backend, step string, before withdrawal.Withdrawal, job time.Time) {
	t.Helper()
	after, err := b.Ledger.Find(context.Background(), before.ID)
	if err != nil {
		t.Fatalf("%s: find: %v", step, err)
	}
	if diff := cmp.Diff(before, after, cmp.Comparer(func(a, b decimal.Decimal) bool { return a.Equal(b) })); diff != "" {
		t.Fatalf("%s changed the record (-before +after):\n%s", step, diff)
	}
	at, ok := jobDue(t, b, before.Ref())
	switch {
	case job.IsZero() && ok:
		t.Fatalf("%s scheduled a job at %v", step, at)
	case !job.IsZero() && (!ok || !at.Equal(job)):
		t.Fatalf("%s: the job is due %v (%v), want still %v", step, at, ok, job)
	}
}

// testCallbackNotSent: a provider's callback about a withdrawal never sent
// (scheduled, or cancelled before any call) is refused with ErrNotSent and
// changes nothing: not the record, not its job, and its event id is not
// kept, so the same event after a real send still applies.
func testCallbackNotSent(t *testing.T, b Backend) {
	ctx := context.Background()
	for _, st := range []withdrawal.Status{withdrawal.Paid, withdrawal.Failed, withdrawal.Returned} {
		t.Run(string(st), func(t *testing.T) {
			due := T0.Add(time.Hour)
			w := NewWithdrawal(b.Queue, "alice-"+string(st), due)
			Create(t, b.Ledger, w)
			before, err := b.Ledger.Find(ctx, w.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !before.NeverSent() {
				t.Fatalf("a new withdrawal is not NeverSent: %+v", before)
			}
			cb := withdrawal.Callback{EventID: "ev-" + string(st), Status: st, PayoutID: "po_forged", Reason: "r", At: T0}
			got, _, err := b.Ledger.Apply(ctx, w.ID, cb)
			if !errors.Is(err, withdrawal.ErrNotSent) || got.ID != w.ID || got.Status != withdrawal.Scheduled {
				t.Fatalf("%s callback on a scheduled withdrawal: %+v %v, want ErrNotSent with the record", st, got, err)
			}
			sameRecord(t, b, string(st)+" callback on a scheduled withdrawal", before, due)
			// Again: still refused (the event was not kept as applied).
			if _, _, err := b.Ledger.Apply(ctx, w.ID, cb); !errors.Is(err, withdrawal.ErrNotSent) {
				t.Fatalf("the same callback again: %v, want ErrNotSent", err)
			}
			sameRecord(t, b, "the same callback again", before, due)

			// Sent for real, the same event applies.
			if _, start, _ := begin(t, b, w.Ref(), due, due.Add(time.Minute)); start != withdrawal.StartAttempt {
				t.Fatalf("begin: %v", start)
			}
			cb.At = due.Add(time.Second)
			got, applied, err := b.Ledger.Apply(ctx, w.ID, cb)
			if err != nil || applied != withdrawal.Changed || got.Status != st {
				t.Fatalf("the same %s callback after the send: %+v %v %v, want applied", st, got.Status, applied, err)
			}
		})
	}
}

// testCancelledNotSent: a withdrawal cancelled before any call was never
// sent: a callback is refused and changes nothing. One cancelled after a
// call that the provider answered without paying (a 503) was sent: a paid
// callback then contradicts it (a conflict), as before.
func testCancelledNotSent(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "carol", T0.Add(time.Hour))
	Create(t, b.Ledger, w)
	if _, err := b.Ledger.Cancel(ctx, "carol", w.ID, T0); err != nil {
		t.Fatal(err)
	}
	before, err := b.Ledger.Find(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []withdrawal.Status{withdrawal.Paid, withdrawal.Failed, withdrawal.Returned} {
		got, _, err := b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: "ev-" + string(st), Status: st, At: T0})
		if !errors.Is(err, withdrawal.ErrNotSent) || got.Status != withdrawal.Cancelled {
			t.Fatalf("%s callback on a withdrawal cancelled before any call: %+v %v, want ErrNotSent", st, got, err)
		}
		sameRecord(t, b, string(st)+" callback on a cancelled withdrawal", before, time.Time{})
	}

	sent := NewWithdrawal(b.Queue, "dave", T0)
	Create(t, b.Ledger, sent)
	_, _, a := begin(t, b, sent.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Retry(ctx, sent.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ledger.Cancel(ctx, "dave", sent.ID, T0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, applied, err := b.Ledger.Apply(ctx, sent.ID, withdrawal.Callback{EventID: "ev-p", Status: withdrawal.Paid, At: T0})
	if err != nil || applied != withdrawal.Conflict || got.Status != withdrawal.Cancelled {
		t.Fatalf("paid callback on a withdrawal cancelled after a call: %+v %v %v, want a conflict", got.Status, applied, err)
	}
}

// testResolveNotSent: an operator's resolution of a withdrawal never sent
// is refused with the reason and changes nothing: it stays scheduled, its
// job stays queued at its time, finance is told nothing. Of one that no
// call may have paid, only failed past the maximum attempts is taken.
func testResolveNotSent(t *testing.T, b Backend) {
	ctx := context.Background()
	due := T0.Add(time.Hour)
	w := NewWithdrawal(b.Queue, "alice", due)
	Create(t, b.Ledger, w)
	before, err := b.Ledger.Find(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []withdrawal.Resolution{
		{Status: withdrawal.Paid, PayoutID: "po_invented", By: "ops", At: T0},
		{Status: withdrawal.Failed, Reason: "not at the provider", By: "ops", At: T0},
		{Status: withdrawal.Failed, Reason: "not at the provider", By: "ops", At: T0, MaxAttempts: 1},
		{Status: withdrawal.Paid, PayoutID: "po_invented", By: "ops", At: due.Add(time.Hour)},
	} {
		got, err := b.Ledger.Resolve(ctx, w.ID, r)
		if !errors.Is(err, withdrawal.ErrNotResolvable) || got.Status != withdrawal.Scheduled {
			t.Fatalf("resolve %+v of a scheduled withdrawal: %+v %v, want ErrNotResolvable", r, got, err)
		}
		if withdrawal.Unresolvable(got, r) == "" {
			t.Fatalf("resolve %+v: the domain gives no reason for the refusal", r)
		}
		sameRecord(t, b, "resolve as "+string(r.Status)+" of a scheduled withdrawal", before, due)
		if got.Untold() || got.Told != "" || got.ResolvedBy != "" {
			t.Fatalf("finance would hear of a refused resolution: %+v", got)
		}
	}

	// Sent and answered without a payout (a 503 under the attempts): the
	// payout step settles it, not an operator.
	s := NewWithdrawal(b.Queue, "bob", T0)
	Create(t, b.Ledger, s)
	_, _, a := begin(t, b, s.Ref(), T0, T0.Add(time.Minute))
	retried, err := b.Ledger.Retry(ctx, s.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "401"})
	if err != nil || retried.Attempts != 1 || retried.MaybePaid {
		t.Fatalf("retry: %+v %v", retried, err)
	}
	for _, r := range []withdrawal.Resolution{
		{Status: withdrawal.Failed, Reason: "x", By: "ops", At: T0.Add(time.Second), MaxAttempts: 2},
		{Status: withdrawal.Paid, PayoutID: "po_x", By: "ops", At: T0.Add(time.Second), MaxAttempts: 1},
	} {
		if _, err := b.Ledger.Resolve(ctx, s.ID, r); !errors.Is(err, withdrawal.ErrNotResolvable) {
			t.Fatalf("resolve %+v of a retrying withdrawal no call may have paid: %v, want ErrNotResolvable", r, err)
		}
		sameRecord(t, b, "a refused resolution of a retrying withdrawal", retried, T0.Add(time.Hour))
	}
	// Past the maximum attempts (our credentials refused for good), it is
	// an operator's to fail.
	r := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "credentials never fixed", By: "ops", At: T0.Add(time.Second),
		MaxAttempts: 1}
	got, err := b.Ledger.Resolve(ctx, s.ID, r)
	if err != nil || got.Status != withdrawal.Failed || got.ResolvedBy != "ops" || !got.Untold() {
		t.Fatalf("resolve as failed past the attempts: %+v %v", got, err)
	}
	if at, ok := jobDue(t, b, s.Ref()); !ok || at.After(r.At) {
		t.Fatalf("after a resolution the job is due %v (%v), want by %v: finance must hear", at, ok, r.At)
	}
}
