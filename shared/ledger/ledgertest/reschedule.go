package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// reschedule moves w to due as its owner, with an optional revision.
func reschedule(b Backend, w withdrawal.Withdrawal, due, now time.Time, rev *int64) (withdrawal.Withdrawal, error) {
	return b.Ledger.Reschedule(context.Background(), withdrawal.Reschedule{UserID: w.UserID, ID: w.ID, DueAt: due, Now: now,
		IfRevision: rev, By: withdrawal.ByUser})
}

func revision(r int64) *int64 { return &r }

func testReschedule(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(10*time.Minute))
	Create(t, b.Ledger, w)

	// Later, then earlier: the record and its job move together, to the ms.
	for _, due := range []time.Time{T0.Add(20*time.Minute + 7*time.Millisecond), T0.Add(time.Minute + 3*time.Millisecond)} {
		before, _ := b.Ledger.Find(ctx, w.ID)
		got, err := reschedule(b, w, due, T0.Add(time.Second), nil)
		if err != nil || !got.DueAt.Equal(due) || got.Status != withdrawal.Scheduled || !got.UpdatedAt.Equal(T0.Add(time.Second)) ||
			got.RescheduledBy != withdrawal.ByUser || !got.RescheduledFrom.Equal(before.DueAt) || got.Revision != before.Revision+1 {
			t.Fatalf("reschedule to %v: %+v %v", due, got, err)
		}
		if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(due) {
			t.Fatalf("rescheduled to %v, the job is due %v (%v)", due, at, ok)
		}
	}
	cur, _ := b.Ledger.Find(ctx, w.ID)

	// If-Match: a stale revision changes nothing; the current one moves it.
	got, err := reschedule(b, w, T0.Add(time.Hour), T0, revision(cur.Revision-1))
	if !errors.Is(err, withdrawal.ErrPreconditionFailed) || !got.DueAt.Equal(cur.DueAt) || got.Revision != cur.Revision {
		t.Fatalf("reschedule at a stale revision: %+v %v", got, err)
	}
	if now, _ := b.Ledger.Find(ctx, w.ID); now.Revision != cur.Revision || !now.DueAt.Equal(cur.DueAt) {
		t.Fatalf("a refused reschedule changed the record: %+v", now)
	}
	if at, _ := jobDue(t, b, w.Ref()); !at.Equal(cur.DueAt) {
		t.Fatalf("a refused reschedule moved the job to %v", at)
	}
	if got, err = reschedule(b, w, T0.Add(time.Hour), T0, revision(cur.Revision)); err != nil || !got.DueAt.Equal(T0.Add(time.Hour)) {
		t.Fatalf("reschedule at the current revision: %+v %v", got, err)
	}

	// Someone else's, or no such id.
	if _, err := b.Ledger.Reschedule(ctx, withdrawal.Reschedule{UserID: "mallory", ID: w.ID, DueAt: T0, Now: T0}); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("someone else's: %v", err)
	}
	if _, err := b.Ledger.Reschedule(ctx, withdrawal.Reschedule{UserID: "alice", ID: withdrawal.NewID(T0), DueAt: T0, Now: T0}); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}

	// An operator's reason and name are kept.
	got, err = b.Ledger.Reschedule(ctx, withdrawal.Reschedule{UserID: "alice", ID: w.ID, DueAt: T0.Add(2 * time.Minute), Now: T0,
		By: "op-jane", Reason: "customer asked by phone"})
	if err != nil || got.RescheduledBy != "op-jane" || got.RescheduleReason != "customer asked by phone" || !got.RescheduledAt.Equal(T0) {
		t.Fatalf("operator reschedule: %+v %v", got, err)
	}

	// Processing: 409, and the attempt's record is untouched.
	_, start, _ := begin(t, b, w.Ref(), T0.Add(2*time.Minute), T0.Add(3*time.Minute))
	if start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	got, err = reschedule(b, w, T0.Add(time.Hour), T0.Add(2*time.Minute), nil)
	if !errors.Is(err, withdrawal.ErrNotReschedulable) || got.Status != withdrawal.Processing {
		t.Fatalf("reschedule while processing: %+v %v", got, err)
	}
}

func testRescheduleRetrying(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Minute), Now: T0, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	// Retrying with no call that may have paid: the new time replaces the
	// retry time; attempts and the last error stay.
	newDue := T0.Add(10 * time.Minute)
	got, err := reschedule(b, w, newDue, T0.Add(time.Second), nil)
	if err != nil || got.Status != withdrawal.Retrying || !got.DueAt.Equal(newDue) || got.Attempts != 1 || got.LastError != "503" {
		t.Fatalf("reschedule a retrying one: %+v %v", got, err)
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(newDue) {
		t.Fatalf("the job is newDue %v (%v), want %v", at, ok, newDue)
	}
	if _, start, _ := begin(t, b, w.Ref(), T0.Add(time.Minute), T0.Add(2*time.Minute)); start != withdrawal.StartNotDue {
		t.Fatalf("begin at the old retry time: %v", start)
	}
	_, start, a := begin(t, b, w.Ref(), newDue, newDue.Add(time.Minute))
	if start != withdrawal.StartAttempt {
		t.Fatalf("begin at the new time: %v", start)
	}
	// A call that may have paid: no more rescheduling.
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: newDue.Add(time.Minute), Now: newDue, LastError: "timeout", MaybePaid: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := reschedule(b, w, newDue.Add(time.Hour), newDue, nil); !errors.Is(err, withdrawal.ErrNotReschedulable) || !got.DueAt.Equal(newDue.Add(time.Minute)) {
		t.Fatalf("reschedule of one that may have paid: %+v %v", got, err)
	}

	// Cancelled and paid ones: 409.
	c := NewWithdrawal(b.Queue, "bob", T0.Add(time.Hour))
	Create(t, b.Ledger, c)
	if _, err := b.Ledger.Cancel(ctx, "bob", c.ID, T0); err != nil {
		t.Fatal(err)
	}
	if _, err := reschedule(b, c, T0.Add(time.Minute), T0, nil); !errors.Is(err, withdrawal.ErrNotReschedulable) {
		t.Fatalf("reschedule a cancelled one: %v", err)
	}
	if ids := due(t, b.Queue); len(ids) > 1 || (len(ids) == 1 && ids[0] == c.ID) {
		t.Fatalf("a refused reschedule scheduled the cancelled one: %v", ids)
	}
	p := NewWithdrawal(b.Queue, "carol", T0)
	Create(t, b.Ledger, p)
	_, _, a = begin(t, b, p.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Finish(ctx, p.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, At: T0}); err != nil {
		t.Fatal(err)
	}
	if _, err := reschedule(b, p, T0.Add(time.Minute), T0, nil); !errors.Is(err, withdrawal.ErrNotReschedulable) {
		t.Fatalf("reschedule a paid one: %v", err)
	}
}

// testRescheduleFence: a delivery claimed for the old time never starts the
// record before its new time, later or earlier, to the millisecond; the job
// at the new time starts it.
func testRescheduleFence(t *testing.T, b Backend) {
	ctx := context.Background()
	old := T0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		due  time.Time
	}{
		{"later within the clock skew", old.Add(300 * time.Millisecond)},
		{"later", old.Add(time.Hour)},
		{"earlier", old.Add(-30 * time.Second)},
	} {
		w := NewWithdrawal(b.Queue, "user-"+tc.name, old)
		Create(t, b.Ledger, w)
		// The poller claims the old time; its delivery is on its way.
		claimed := claimOf(t, b, w, old)
		if _, err := reschedule(b, w, tc.due, T0, nil); err != nil {
			t.Fatalf("%s: reschedule: %v", tc.name, err)
		}
		// The old delivery arrives at every ms up to the new due: never starts.
		for _, now := range []time.Time{old, tc.due.Add(-time.Millisecond)} {
			if !now.Before(tc.due) {
				continue
			}
			if got, start, err := b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(now), Now: now,
				Until: now.Add(time.Minute), Claimed: claimed}); err != nil || start != withdrawal.StartNotDue {
				t.Fatalf("%s: the delivery of %v at %v: %v %v (record due %v)", tc.name, claimed, now, start, err, got.DueAt)
			}
		}
		if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(tc.due) {
			t.Fatalf("%s: the job is due %v (%v), want %v", tc.name, at, ok, tc.due)
		}
		// The new time's own delivery starts it at its time.
		if at := claimOf(t, b, w, tc.due); !at.Equal(tc.due) {
			t.Fatalf("%s: claimed at the new time for %v", tc.name, at)
		}
		if _, start, err := b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(tc.due), Now: tc.due,
			Until: tc.due.Add(time.Minute), Claimed: tc.due}); err != nil || start != withdrawal.StartAttempt {
			t.Fatalf("%s: the delivery of the new time: %v %v", tc.name, start, err)
		}
	}
}

// claimOf claims what is due on w's shard at now and returns the due time
// w's job was claimed for (other cases' jobs on the shard are left claimed).
func claimOf(t *testing.T, b Backend, w withdrawal.Withdrawal, now time.Time) time.Time {
	t.Helper()
	c, err := b.Queue.Claim(context.Background(), w.Shard, now, time.Minute, delayq.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range c.Jobs {
		if j.ID == w.ID {
			return time.UnixMilli(j.Due).UTC()
		}
	}
	t.Fatalf("claim at %v: %s not due", now, w.ID)
	return time.Time{}
}

// testRescheduleDropsClaim: a claim of the old time not yet handed over
// (still leased) is dropped, so its lease expiring never brings it back.
func testRescheduleDropsClaim(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	if c, err := b.Queue.Claim(ctx, w.Shard, T0, time.Minute, 10); err != nil || len(c.Jobs) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	due := T0.Add(time.Hour)
	if _, err := reschedule(b, w, due, T0, nil); err != nil {
		t.Fatal(err)
	}
	st, err := b.Queue.Stats(ctx, T0)
	if err != nil {
		t.Fatal(err)
	}
	if _, isRedis := b.Ledger.(interface {
		PurgeExpiredKeys(context.Context, time.Time) (int, error)
	}); isRedis && st.Inflight != 0 {
		t.Fatalf("the old claim is still leased: %+v", st)
	}
	// Its lease runs out: nothing comes back before the new time.
	if c, err := b.Queue.Claim(ctx, w.Shard, T0.Add(2*time.Minute), time.Minute, 10); err != nil {
		t.Fatal(err)
	} else {
		for _, j := range c.Jobs {
			if _, start, _ := begin(t, b, w.Ref(), T0.Add(2*time.Minute), T0.Add(3*time.Minute)); start == withdrawal.StartAttempt {
				t.Fatalf("job %+v started the record before its new time", j)
			}
		}
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(due) {
		t.Fatalf("the job is due %v (%v), want %v", at, ok, due)
	}
}

// testRescheduleRace: reschedules race the payout step's Begin: either the
// reschedule holds (the record is not begun before its new time) or it is
// refused because the attempt began.
func testRescheduleRace(t *testing.T, b Backend) {
	ctx := context.Background()
	for i := range 40 {
		w := NewWithdrawal(b.Queue, fmt.Sprintf("user-%d", i), T0)
		Create(t, b.Ledger, w)
		later := T0.Add(time.Duration(1+i) * time.Millisecond)
		release := make(chan struct{})
		var (
			wg     sync.WaitGroup
			resErr error
			start  withdrawal.Start
		)
		wg.Go(func() { <-release; _, resErr = reschedule(b, w, later, T0, nil) })
		wg.Go(func() {
			<-release
			_, start, _ = b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(T0), Now: T0,
				Until: T0.Add(time.Minute), Claimed: T0})
		})
		close(release)
		wg.Wait()
		rescheduled := resErr == nil
		attempted := start == withdrawal.StartAttempt
		if rescheduled == attempted {
			t.Fatalf("race %d: rescheduled=%v (%v) attempted=%v: exactly one must win", i, rescheduled, resErr, attempted)
		}
		if !rescheduled && !errors.Is(resErr, withdrawal.ErrNotReschedulable) {
			t.Fatalf("race %d: the reschedule lost with %v, want ErrNotReschedulable", i, resErr)
		}
	}
}

// testRescheduleLostAnswer: a reschedule whose answer was lost and which
// was sent again is our own: 200, not 412, and counted once.
func testRescheduleLostAnswer(t *testing.T, b Backend) {
	if b.Lose == nil {
		t.Skip("this backend cannot lose answers")
	}
	t.Cleanup(b.Lose.Disarm)
	w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Minute))
	Create(t, b.Ledger, w)
	lost := b.Lose.Lost()
	b.Lose.Arm(lostreply.Resend)
	got, err := reschedule(b, w, T0.Add(time.Hour), T0, revision(0))
	b.Lose.Disarm()
	if err != nil || !got.DueAt.Equal(T0.Add(time.Hour)) || got.Revision != 1 {
		t.Fatalf("reschedule whose answer was lost: %+v %v", got, err)
	}
	if b.Lose.Lost() == lost {
		t.Fatal("no answer was lost; the test did not test")
	}
}

// testRevisions drives records through every kind of write and checks that
// each one gives a new ETag, and a read none.
func testRevisions(t *testing.T, b Backend) {
	ctx := context.Background()
	seen := map[string]string{}
	var last withdrawal.Withdrawal
	note := func(step string, w withdrawal.Withdrawal) {
		t.Helper()
		if w.ID == "" {
			t.Fatalf("%s: no record", step)
		}
		again, err := b.Ledger.Find(ctx, w.ID)
		if err != nil || again.ETag() != w.ETag() {
			t.Fatalf("%s: a read gives %s (%v), the write %s", step, again.ETag(), err, w.ETag())
		}
		if prev, ok := seen[w.ETag()]; ok {
			t.Fatalf("%s: ETag %s again, as after %s", step, w.ETag(), prev)
		}
		seen[w.ETag()] = step
		last = w
	}
	must := func(w withdrawal.Withdrawal, err error) withdrawal.Withdrawal {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	note("create", must(b.Ledger.Find(ctx, w.ID)))
	note("reschedule", must(reschedule(b, w, T0.Add(time.Second), T0, nil)))
	got, start, a := begin(t, b, w.Ref(), T0.Add(time.Second), T0.Add(time.Minute))
	if start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	note("begin", got)
	if _, start, _ := begin(t, b, w.Ref(), T0.Add(time.Second), T0.Add(time.Minute)); start != withdrawal.StartBusy {
		t.Fatalf("second begin: %v", start)
	}
	if now := must(b.Ledger.Find(ctx, w.ID)); now.ETag() != last.ETag() {
		t.Fatalf("a busy begin changed the ETag: %s -> %s", last.ETag(), now.ETag())
	}
	note("retry", must(b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Minute), Now: T0, LastError: "503"})))
	note("reschedule retrying", must(reschedule(b, w, T0.Add(2*time.Minute), T0, nil)))
	got, _, a = begin(t, b, w.Ref(), T0.Add(2*time.Minute), T0.Add(3*time.Minute))
	note("begin again", got)
	note("retry maybe paid", must(b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(3 * time.Minute), Now: T0,
		LastError: "timeout", MaybePaid: true})))
	got, _, a = begin(t, b, w.Ref(), T0.Add(3*time.Minute), T0.Add(4*time.Minute))
	note("begin to settle", got)
	note("send", must(b.Ledger.Send(ctx, w.Ref(), a, T0.Add(3*time.Minute), true)))
	note("finish", must(b.Ledger.Finish(ctx, w.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, PayoutID: "po", At: T0.Add(3 * time.Minute)})))
	if err := b.Ledger.MarkNotified(ctx, w.Ref(), withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	note("notified", must(b.Ledger.Find(ctx, w.ID)))
	got, _, err := b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: "ev-1", Status: withdrawal.Paid, At: T0})
	note("callback kept (unchanged)", must(got, err))
	got, _, err = b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: "ev-2", Status: withdrawal.Returned, At: T0})
	note("callback returned", must(got, err))
	if err := b.Ledger.MarkNotified(ctx, w.Ref(), withdrawal.Returned); err != nil {
		t.Fatal(err)
	}
	note("notified returned", must(b.Ledger.Find(ctx, w.ID)))

	c := NewWithdrawal(b.Queue, "bob", T0.Add(time.Hour))
	Create(t, b.Ledger, c)
	note("create another", must(b.Ledger.Find(ctx, c.ID)))
	note("cancel", must(b.Ledger.Cancel(ctx, "bob", c.ID, T0)))
	r := NewWithdrawal(b.Queue, "carol", T0.Add(time.Hour))
	Create(t, b.Ledger, r)
	note("create a third", must(b.Ledger.Find(ctx, r.ID)))
	got, _, a = begin(t, b, r.Ref(), T0.Add(time.Hour), T0.Add(time.Hour+time.Minute))
	note("begin the third", got)
	note("retry the third maybe paid", must(b.Ledger.Retry(ctx, r.Ref(), a, withdrawal.RetryAt{At: T0.Add(2 * time.Hour), Now: T0,
		LastError: "timeout", MaybePaid: true})))
	note("resolve", must(b.Ledger.Resolve(ctx, r.ID, withdrawal.Resolution{Status: withdrawal.Failed, Reason: "r", By: "op", At: T0})))
}
