// Package ledgertest is the conformance suite every withdrawal ledger backend
// must pass: the same cases, run over each backend.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Backend is a fresh, empty ledger and the withdrawal queue it schedules on.
type Backend struct {
	Ledger withdrawal.Ledger
	Queue  *delayq.Queue
	// Lose makes the ledger's own writes lose their answers (applied, the
	// answer dropped, then sent again or failed), as a dropped connection
	// does.
	Lose *lostreply.Switch
}

// T0 is the suite's "now".
var T0 = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

// Run runs every case against backends made by newBackend.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, b Backend)
	}{
		{"IdempotencyKeyLifecycle", testKeyLifecycle},
		{"UnfinishedReservationIsTakenOverAfterItsLock", testTakeover},
		{"CreateNeedsItsReservation", testCreateNeedsReservation},
		{"ReadsAreScopedToTheOwner", testOwnerScope},
		{"ListIsNewestFirstAndPages", testList},
		{"CancelOnlyBeforeThePayoutStep", testCancel},
		{"PayoutAttemptLifecycle", testAttempts},
		{"RetryReschedules", testRetry},
		{"ConcurrentBeginsAdmitOneAttempt", testConcurrentBegin},
		{"CancelRacingBeginHasOneWinner", testCancelRace},
		{"ReconcilerGivesLostJobsBack", testReconcile},
		{"ALongDelayIsNeverARepair", testLongDelayIsNoRepair},
		{"EveryLostJobIsFound", testEveryLostJobIsFound},
		{"ADueJobInTheWorkQueueGetsTheGrace", workQueueGrace(graceDue)},
		{"AnAttemptPastItsDeadlineGetsTheGrace", workQueueGrace(graceDeadline)},
		{"AnUntoldOutcomeGetsTheGrace", workQueueGrace(graceUntold)},
		{"EarlyJobIsPutBackAtItsDueTime", testNotDue},
		{"BusyBeginKeepsALaterSchedule", testBusyKeepsLater},
		{"TakeoverMayHavePaid", testTakeover2},
		{"MaybePaidIsNeitherCancelledNorFailed", testMaybePaid},
		{"LostAnswersAreRecognisedAsOurOwn", testLostAnswers},
		{"OperatorResolution", testResolve},
		{"CallbacksNeverMoveBackwards", testCallbacks},
		{"FinanceIsToldOfEachOutcome", testTold},
		{"FindAndOutstanding", testFind},
		{"RequestIDStaysWithTheRecord", testRequestID},
		{"RescheduleMovesRecordAndJob", testReschedule},
		{"RescheduleRetryingKeepsAttempts", testRescheduleRetrying},
		{"RescheduleFencesTheOldDelivery", testRescheduleFence},
		{"RescheduleDropsALeasedClaim", testRescheduleDropsClaim},
		{"RescheduleRacingBeginHasOneWinner", testRescheduleRace},
		{"RescheduleLostAnswerIsOurOwn", testRescheduleLostAnswer},
		{"EveryWriteChangesTheETag", testRevisions},
		{"ReplayIsTheFirstAnswerAfterChanges", testReplayAfterChanges},
		{"PaidLateByATakenOverAttemptIsRecorded", testPaidLate},
		{"NeverReceivedNeedsItsTolerance", testNeverReceivedNeedsItsTolerance},
		{"ReplayIsAnsweredBeforeTheClock", testReplayBeforeTheClock},
		{"CallbackForAWithdrawalNeverSentChangesNothing", testCallbackNotSent},
		{"CallbackForAWithdrawalCancelledBeforeAnyCall", testCancelledNotSent},
		{"ResolutionOfAWithdrawalNeverSentIsRefused", testResolveNotSent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newBackend(t)) })
	}
}

// NewWithdrawal returns a scheduled withdrawal of user due at due.
func NewWithdrawal(q *delayq.Queue, user string, due time.Time) withdrawal.Withdrawal {
	return withdrawal.Withdrawal{
		ID: withdrawal.NewID(T0), UserID: user, Shard: q.ShardFor(user), Status: withdrawal.Scheduled,
		Amount: decimal.RequireFromString("125.50"), Currency: "CNY", Destination: "bank_6222",
		DueAt: due, CreatedAt: T0, UpdatedAt: T0,
	}
}

// Create reserves a key for w and creates it, failing the test on error.
func Create(t *testing.T, l withdrawal.Ledger, w withdrawal.Withdrawal) {
	t.Helper()
	ctx := context.Background()
	key := withdrawal.IdemKey{UserID: w.UserID, Key: "k-" + w.ID, Shard: w.Shard}
	st, err := l.Reserve(ctx, reservation(key, "fp", w.ID, T0))
	if err != nil || st.Phase != withdrawal.KeyAcquired {
		t.Fatalf("reserve: %+v %v", st, err)
	}
	if err := l.Create(ctx, w, key, []byte(`{"id":"`+w.ID+`"}`)); err != nil {
		t.Fatalf("create: %v", err)
	}
}

func reservation(key withdrawal.IdemKey, fp, id string, now time.Time) withdrawal.Reservation {
	return withdrawal.Reservation{
		Key: key, Fingerprint: fp, ID: id, Now: now,
		LockUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour),
	}
}

func due(t *testing.T, q *delayq.Queue) []string {
	t.Helper()
	var ids []string
	for n := range q.Shards() {
		c, err := q.Claim(context.Background(), n, T0.Add(365*24*time.Hour), time.Minute, delayq.MaxBatch)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range c.Jobs {
			ids = append(ids, j.ID)
		}
	}
	return ids
}

func testKeyLifecycle(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Minute))
	key := withdrawal.IdemKey{UserID: "alice", Key: "key-1", Shard: w.Shard}
	st, err := b.Ledger.Reserve(ctx, reservation(key, "fp1", w.ID, T0))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(withdrawal.KeyState{Phase: withdrawal.KeyAcquired, Fingerprint: "fp1", ID: w.ID}, st); diff != "" {
		t.Fatalf("fresh key (-want +got):\n%s", diff)
	}
	// While the first request runs, the key is in flight for anybody else.
	st, err = b.Ledger.Reserve(ctx, reservation(key, "fp1", "wd_other", T0.Add(time.Second)))
	if err != nil || st.Phase != withdrawal.KeyInFlight || st.ID != w.ID {
		t.Fatalf("second reserve while in flight: %+v %v", st, err)
	}
	// The stored answer to a create is the withdrawal as created, which a
	// ledger may keep or rebuild from the record.
	first, err := withdrawal.EncodeCreated(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ledger.Create(ctx, w, key, first); err != nil {
		t.Fatal(err)
	}
	st, err = b.Ledger.Reserve(ctx, reservation(key, "fp2", "wd_other", T0.Add(2*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	want := withdrawal.KeyState{Phase: withdrawal.KeyCompleted, Fingerprint: "fp1", ID: w.ID, Response: first}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Fatalf("completed key (-want +got):\n%s", diff)
	}
	// The same key of another user is another key.
	other := withdrawal.IdemKey{UserID: "bob", Key: "key-1", Shard: b.Queue.ShardFor("bob")}
	st, err = b.Ledger.Reserve(ctx, reservation(other, "fp1", "wd_bob", T0))
	if err != nil || st.Phase != withdrawal.KeyAcquired || st.ID != "wd_bob" {
		t.Fatalf("other user's key: %+v %v", st, err)
	}
	// After its retention the key is forgotten and free again.
	st, err = b.Ledger.Reserve(ctx, reservation(key, "fp3", "wd_new", T0.Add(24*time.Hour+time.Second)))
	if err != nil || st.Phase != withdrawal.KeyAcquired || st.ID != "wd_new" {
		t.Fatalf("expired key: %+v %v", st, err)
	}
	// Release frees a reservation that was never completed.
	if err := b.Ledger.Release(ctx, key, "wd_new", false); err != nil {
		t.Fatal(err)
	}
	st, err = b.Ledger.Reserve(ctx, reservation(key, "fp4", "wd_newer", T0.Add(24*time.Hour+2*time.Second)))
	if err != nil || st.Phase != withdrawal.KeyAcquired || st.ID != "wd_newer" {
		t.Fatalf("released key: %+v %v", st, err)
	}
}

func testTakeover(t *testing.T, b Backend) {
	ctx := context.Background()
	key := withdrawal.IdemKey{UserID: "alice", Key: "k", Shard: b.Queue.ShardFor("alice")}
	if _, err := b.Ledger.Reserve(ctx, reservation(key, "fp", "wd_first", T0)); err != nil {
		t.Fatal(err)
	}
	// The first request died. Past its lock, another body still conflicts...
	st, err := b.Ledger.Reserve(ctx, reservation(key, "other", "wd_second", T0.Add(31*time.Second)))
	if err != nil || st.Phase != withdrawal.KeyInFlight || st.Fingerprint != "fp" {
		t.Fatalf("takeover with another body: %+v %v", st, err)
	}
	// ...while the same body takes over and creates the SAME withdrawal id, so
	// a create that did land before the crash is never doubled.
	st, err = b.Ledger.Reserve(ctx, reservation(key, "fp", "wd_second", T0.Add(31*time.Second)))
	if err != nil || st.Phase != withdrawal.KeyAcquired || st.ID != "wd_first" {
		t.Fatalf("takeover with the same body: %+v %v", st, err)
	}
}

func testCreateNeedsReservation(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	key := withdrawal.IdemKey{UserID: "alice", Key: "never-reserved", Shard: w.Shard}
	if err := b.Ledger.Create(ctx, w, key, nil); !errors.Is(err, withdrawal.ErrReservationLost) {
		t.Fatalf("create without reservation: %v", err)
	}
	if _, err := b.Ledger.Get(ctx, "alice", w.ID); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("refused create left a record: %v", err)
	}
	if got := due(t, b.Queue); len(got) != 0 {
		t.Fatalf("refused create scheduled %v", got)
	}
	Create(t, b.Ledger, w)
	key2 := withdrawal.IdemKey{UserID: "alice", Key: "k2", Shard: w.Shard}
	if _, err := b.Ledger.Reserve(ctx, reservation(key2, "fp", w.ID, T0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Ledger.Create(ctx, w, key2, nil); !errors.Is(err, withdrawal.ErrExists) {
		t.Fatalf("second create of one id: %v", err)
	}
}

func testOwnerScope(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Minute))
	Create(t, b.Ledger, w)
	got, err := b.Ledger.Get(ctx, "alice", w.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Op is the ledger's own bookkeeping of its writes.
	if diff := cmp.Diff(w, got, cmp.Comparer(func(a, b decimal.Decimal) bool { return a.Equal(b) }),
		cmpopts.IgnoreFields(withdrawal.Withdrawal{}, "Op")); diff != "" {
		t.Fatalf("record (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ user, id string }{{"bob", w.ID}, {"alice", withdrawal.NewID(T0)}} {
		if _, err := b.Ledger.Get(ctx, tc.user, tc.id); !errors.Is(err, withdrawal.ErrNotFound) {
			t.Errorf("Get(%s, %s) = %v, want ErrNotFound", tc.user, tc.id, err)
		}
		if _, err := b.Ledger.Cancel(ctx, tc.user, tc.id, T0); !errors.Is(err, withdrawal.ErrNotFound) {
			t.Errorf("Cancel(%s, %s) = %v, want ErrNotFound", tc.user, tc.id, err)
		}
	}
	if got, _ := b.Ledger.Get(ctx, "alice", w.ID); got.Status != withdrawal.Scheduled {
		t.Fatalf("someone else's cancel changed the record: %s", got.Status)
	}
}

func testList(t *testing.T, b Backend) {
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Hour))
		w.ID = withdrawal.NewID(T0.Add(time.Duration(i) * time.Millisecond))
		Create(t, b.Ledger, w)
		ids = append([]string{w.ID}, ids...) // newest first
	}
	Create(t, b.Ledger, NewWithdrawal(b.Queue, "bob", T0))
	var got []string
	after := ""
	for {
		page, err := b.Ledger.List(ctx, "alice", 2, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range page {
			got = append(got, w.ID)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].ID
	}
	if diff := cmp.Diff(ids, got); diff != "" {
		t.Fatalf("pages (-want +got):\n%s", diff)
	}
	if page, err := b.Ledger.List(ctx, "carol", 10, ""); err != nil || len(page) != 0 {
		t.Fatalf("a user with no withdrawals: %v %v", page, err)
	}
}

func testCancel(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Minute))
	Create(t, b.Ledger, w)
	got, err := b.Ledger.Cancel(ctx, "alice", w.ID, T0.Add(time.Second))
	if err != nil || got.Status != withdrawal.Cancelled || !got.UpdatedAt.Equal(T0.Add(time.Second)) {
		t.Fatalf("cancel: %+v %v", got, err)
	}
	if ids := due(t, b.Queue); len(ids) != 0 {
		t.Fatalf("cancelled withdrawal still scheduled: %v", ids)
	}
	if got, err := b.Ledger.Cancel(ctx, "alice", w.ID, T0.Add(2*time.Second)); err != nil || got.Status != withdrawal.Cancelled {
		t.Fatalf("second cancel: %+v %v", got, err)
	}
	if _, start, _ := begin(t, b, w.Ref(), T0.Add(time.Hour), T0.Add(2*time.Hour)); start != withdrawal.StartFinal {
		t.Fatalf("begin on cancelled: %v", start)
	}

	w2 := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w2)
	if _, start, _ := begin(t, b, w2.Ref(), T0, T0.Add(time.Minute)); start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	got, err = b.Ledger.Cancel(ctx, "alice", w2.ID, T0)
	if !errors.Is(err, withdrawal.ErrNotCancellable) || got.Status != withdrawal.Processing {
		t.Fatalf("cancel while processing: %+v %v", got, err)
	}
}

// begin starts an attempt with a fresh id, failing the test on error.
func begin(t *testing.T, b Backend, ref withdrawal.Ref, now, until time.Time) (withdrawal.Withdrawal, withdrawal.Start, string) {
	t.Helper()
	a := withdrawal.NewAttemptID(now)
	w, start, err := b.Ledger.Begin(context.Background(), ref, withdrawal.Begin{Attempt: a, Now: now, Until: until})
	if err != nil {
		t.Fatalf("begin %s: %v", ref.ID, err)
	}
	return w, start, a
}

// jobDue is when the queue has ref's job scheduled, if it has.
func jobDue(t *testing.T, b Backend, ref withdrawal.Ref) (time.Time, bool) {
	t.Helper()
	at, ok, err := b.Queue.DueAt(context.Background(), ref.Shard, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	return at, ok
}

func testAttempts(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(10*time.Second))
	Create(t, b.Ledger, w)
	ref := w.Ref()
	if _, start, _ := begin(t, b, ref, T0, T0.Add(time.Minute)); start != withdrawal.StartNotDue {
		t.Fatalf("begin before due: %v", start)
	}
	got, start, first := begin(t, b, ref, T0.Add(10*time.Second), T0.Add(40*time.Second))
	if start != withdrawal.StartAttempt || got.Attempts != 1 || got.Status != withdrawal.Processing || got.MaybePaid ||
		got.Attempt != first || !got.FirstSentAt.Equal(T0.Add(10*time.Second)) {
		t.Fatalf("begin when due: %+v %v", got, start)
	}
	if _, start, _ := begin(t, b, ref, T0.Add(20*time.Second), T0.Add(50*time.Second)); start != withdrawal.StartBusy {
		t.Fatalf("second begin within the attempt: %v", start)
	}
	// The busy delivery left the job due again at the attempt's deadline, so
	// a consumer dying mid-attempt is followed up.
	if next, ok, err := b.Queue.NextDue(ctx, ref.Shard); err != nil || !ok || !next.Equal(T0.Add(40*time.Second)) {
		t.Fatalf("after a busy begin the job is due %v %v %v, want at the attempt deadline", next, ok, err)
	}
	// The first consumer died (its request may have left); past the
	// attempt's deadline another takes over: the payout may have been made,
	// so this attempt settles first and counts no call yet.
	got, start, second := begin(t, b, ref, T0.Add(40*time.Second), T0.Add(70*time.Second))
	if start != withdrawal.StartAttempt || got.Attempts != 1 || !got.MaybePaid {
		t.Fatalf("takeover: %+v %v", got, start)
	}
	if _, err := b.Ledger.Finish(ctx, ref, first, withdrawal.Result{Status: withdrawal.Paid, PayoutID: "late", At: T0}); !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("stale finish: %v", err)
	}
	if _, err := b.Ledger.Send(ctx, ref, first, T0.Add(41*time.Second), false); !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("stale send: %v", err)
	}
	got, err := b.Ledger.Send(ctx, ref, second, T0.Add(41*time.Second), false)
	if err != nil || got.Attempts != 2 || !got.MaybePaid || !got.FirstSentAt.Equal(T0.Add(10*time.Second)) {
		t.Fatalf("send: %+v %v", got, err)
	}
	got, err = b.Ledger.Finish(ctx, ref, second, withdrawal.Result{Status: withdrawal.Paid, PayoutID: "po_1", At: T0.Add(41 * time.Second)})
	if err != nil || got.Status != withdrawal.Paid || got.PayoutID != "po_1" || !got.ProcessedAt.Equal(T0.Add(41*time.Second)) ||
		!got.Untold() || got.MaybePaid {
		t.Fatalf("finish: %+v %v", got, err)
	}
	if _, err := b.Ledger.Finish(ctx, ref, second, withdrawal.Result{Status: withdrawal.Failed, At: T0}); !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("finish twice: %v", err)
	}
	got, start, _ = begin(t, b, ref, T0.Add(time.Hour), T0.Add(2*time.Hour))
	if start != withdrawal.StartFinal || got.Status != withdrawal.Paid {
		t.Fatalf("begin after paid: %+v %v", got, start)
	}
	if err := b.Ledger.MarkNotified(ctx, ref, withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Ledger.Get(ctx, "alice", w.ID); got.Untold() || got.Told != withdrawal.Paid || got.Attempts != 2 {
		t.Fatalf("after notify: %+v", got)
	}
	a := withdrawal.NewAttemptID(T0)
	if _, _, err := b.Ledger.Begin(ctx, withdrawal.Ref{Shard: ref.Shard, ID: withdrawal.NewID(T0)}, withdrawal.Begin{Attempt: a, Now: T0, Until: T0}); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("begin of an unknown id: %v", err)
	}
}

func testRetry(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	c, err := b.Queue.Claim(ctx, w.Shard, T0, time.Minute, 10)
	if err != nil || len(c.Jobs) != 1 {
		t.Fatalf("claim: %v %v", c, err)
	}
	_, start, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	if start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	at := T0.Add(45 * time.Second)
	got, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: at, Now: T0.Add(time.Second), LastError: "provider answered 500"})
	if err != nil || got.Status != withdrawal.Retrying || !got.DueAt.Equal(at) || got.LastError != "provider answered 500" || got.MaybePaid {
		t.Fatalf("retry: %+v %v", got, err)
	}
	st, err := b.Queue.Stats(ctx, T0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Due != 1 || st.Inflight != 0 {
		t.Fatalf("after retry the job must be scheduled and out of its lease: %+v", st)
	}
	next, ok, err := b.Queue.NextDue(ctx, w.Shard)
	if err != nil || !ok || !next.Equal(at) {
		t.Fatalf("next due %v %v %v, want %v", next, ok, err, at)
	}
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: at, Now: T0, LastError: "again"}); !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("retry of a retrying record: %v", err)
	}
	if _, start, _ := begin(t, b, w.Ref(), T0.Add(10*time.Second), T0.Add(time.Minute)); start != withdrawal.StartNotDue {
		t.Fatalf("begin before the retry is due: %v", start)
	}
	got, err = b.Ledger.Cancel(ctx, "alice", w.ID, T0.Add(20*time.Second))
	if err != nil || got.Status != withdrawal.Cancelled {
		t.Fatalf("cancel while retrying: %+v %v", got, err)
	}
}

func testConcurrentBegin(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	const n = 16
	starts := make(chan withdrawal.Start, n)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-release
			_, s, err := b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(T0), Now: T0, Until: T0.Add(time.Minute)})
			if err != nil {
				t.Error(err)
			}
			starts <- s
		})
	}
	close(release)
	wg.Wait()
	close(starts)
	count := map[withdrawal.Start]int{}
	for s := range starts {
		count[s]++
	}
	if count[withdrawal.StartAttempt] != 1 || count[withdrawal.StartBusy] != n-1 {
		t.Fatalf("outcomes %v, want one attempt and %d busy", count, n-1)
	}
}

func testCancelRace(t *testing.T, b Backend) {
	ctx := context.Background()
	for i := range 50 {
		w := NewWithdrawal(b.Queue, fmt.Sprintf("user-%d", i), T0)
		Create(t, b.Ledger, w)
		release := make(chan struct{})
		var (
			wg        sync.WaitGroup
			cancelErr error
			start     withdrawal.Start
		)
		wg.Go(func() { <-release; _, cancelErr = b.Ledger.Cancel(ctx, w.UserID, w.ID, T0) })
		wg.Go(func() {
			<-release
			_, start, _ = b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: withdrawal.NewAttemptID(T0), Now: T0, Until: T0.Add(time.Minute)})
		})
		close(release)
		wg.Wait()
		cancelled := cancelErr == nil
		attempted := start == withdrawal.StartAttempt
		if cancelled == attempted {
			t.Fatalf("race %d: cancelled=%v (%v) attempted=%v: exactly one must win", i, cancelled, cancelErr, attempted)
		}
		if !cancelled && !errors.Is(cancelErr, withdrawal.ErrNotCancellable) {
			t.Fatalf("race %d: cancel lost with %v, want ErrNotCancellable", i, cancelErr)
		}
	}
}

// Reconciler is what a ledger backend offers to repair lost jobs.
type Reconciler interface {
	Reconcile(ctx context.Context, now time.Time) (ledger.Reconciliation, error)
}

func testReconcile(t *testing.T, b Backend) {
	r, ok := b.Ledger.(Reconciler)
	if !ok {
		t.Skip("this backend has no reconciler")
	}
	ctx := context.Background()
	// Four withdrawals whose jobs are lost at different steps, and two done.
	scheduled := NewWithdrawal(b.Queue, "u-scheduled", T0)
	processing := NewWithdrawal(b.Queue, "u-processing", T0)
	unnotified := NewWithdrawal(b.Queue, "u-unnotified", T0)
	notified := NewWithdrawal(b.Queue, "u-notified", T0)
	cancelled := NewWithdrawal(b.Queue, "u-cancelled", T0.Add(time.Hour))
	far := NewWithdrawal(b.Queue, "u-far", T0.Add(3*24*time.Hour))
	for _, w := range []withdrawal.Withdrawal{scheduled, processing, unnotified, notified, cancelled, far} {
		Create(t, b.Ledger, w)
	}
	attempts := map[string]string{}
	for _, w := range []withdrawal.Withdrawal{processing, unnotified, notified} {
		_, start, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
		if start != withdrawal.StartAttempt {
			t.Fatalf("begin %s: %v", w.UserID, start)
		}
		attempts[w.ID] = a
	}
	for _, w := range []withdrawal.Withdrawal{unnotified, notified} {
		if _, err := b.Ledger.Finish(ctx, w.Ref(), attempts[w.ID], withdrawal.Result{Status: withdrawal.Paid, At: T0}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Ledger.MarkNotified(ctx, notified.Ref(), withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ledger.Cancel(ctx, "u-cancelled", cancelled.ID, T0); err != nil {
		t.Fatal(err)
	}
	// Every job vanishes (a dead-letter queue took them, or Redis lost them).
	for _, id := range due(t, b.Queue) {
		lost(t, b, id)
	}
	for _, w := range []withdrawal.Withdrawal{scheduled, processing, unnotified, notified} {
		lost(t, b, w.ID)
	}
	rep, err := r.Reconcile(ctx, T0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scheduled != 1 || rep.Redispatched != 1 || rep.Renotified != 1 {
		t.Fatalf("reconciliation %+v, want 1 scheduled, 1 redispatched, 1 renotified", rep)
	}
	held, err := b.Queue.Holds(ctx, []delayq.Ref{delayq.Ref(scheduled.Ref()), delayq.Ref(processing.Ref()), delayq.Ref(unnotified.Ref()), delayq.Ref(notified.Ref()), delayq.Ref(cancelled.Ref())})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, true, true, false, false}, held); diff != "" {
		t.Fatalf("jobs back (-want +got):\n%s", diff)
	}
	// A second pass finds nothing more to do.
	if rep, err := r.Reconcile(ctx, T0.Add(time.Hour)); err != nil || rep.Total() != 0 {
		t.Fatalf("second pass: %+v %v", rep, err)
	}
}

// testLongDelayIsNoRepair: a withdrawal due in 30 days (beyond any Redis
// horizon) goes through reconciler passes over its whole wait without one
// repair: what alarms (Total) stays 0; a ledger that keeps it out of Redis
// until its time nears promotes it once, and its job is then held at its
// exact due time.
func testLongDelayIsNoRepair(t *testing.T, b Backend) {
	r, ok := b.Ledger.(Reconciler)
	if !ok {
		t.Skip("this backend has no reconciler")
	}
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "u-long", T0.Add(30*24*time.Hour))
	Create(t, b.Ledger, w)
	promoted := 0
	// A pass a day, then every 20 minutes over the last two hours (past
	// any horizon of the defaults').
	var passes []time.Time
	for at := T0; at.Before(w.DueAt.Add(-2 * time.Hour)); at = at.Add(24 * time.Hour) {
		passes = append(passes, at)
	}
	for at := w.DueAt.Add(-2 * time.Hour); at.Before(w.DueAt); at = at.Add(20 * time.Minute) {
		passes = append(passes, at)
	}
	for _, at := range passes {
		rep, err := r.Reconcile(ctx, at)
		if err != nil || rep.Total() != 0 {
			t.Fatalf("pass at due - %v: %+v %v; want no repair", w.DueAt.Sub(at), rep, err)
		}
		promoted += rep.Promoted
	}
	if promoted > 1 {
		t.Errorf("promoted %d times, want at most once", promoted)
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(w.DueAt) {
		t.Fatalf("job due %v (%v) 20 minutes before its time, want held at %v", at, ok, w.DueAt)
	}
}

// testEveryLostJobIsFound: many withdrawals, of many users (over every
// queue shard, and every by_state shard of the DynamoDB ledger), lose
// their jobs: Outstanding lists each, and one reconciler pass puts each
// back.
func testEveryLostJobIsFound(t *testing.T, b Backend) {
	r, ok := b.Ledger.(Reconciler)
	if !ok {
		t.Skip("this backend has no reconciler")
	}
	ctx := context.Background()
	const n = 48
	ws := make([]withdrawal.Withdrawal, n)
	for i := range ws {
		ws[i] = NewWithdrawal(b.Queue, fmt.Sprintf("u-%d", i), T0.Add(time.Duration(i)*time.Second))
		Create(t, b.Ledger, ws[i])
	}
	seen := map[string]bool{}
	if err := b.Ledger.Outstanding(ctx, func(w withdrawal.Withdrawal) error { seen[w.ID] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, id := range due(t, b.Queue) {
		lost(t, b, id)
	}
	rep, err := r.Reconcile(ctx, T0.Add(time.Hour))
	if err != nil || rep.Scheduled != n || rep.Total() != n {
		t.Fatalf("reconcile: %+v %v, want all %d scheduled again", rep, err, n)
	}
	refs := make([]delayq.Ref, n)
	for i, w := range ws {
		refs[i] = delayq.Ref(w.Ref())
		if !seen[w.ID] {
			t.Errorf("Outstanding misses %s", w.UserID)
		}
	}
	held, err := b.Queue.Holds(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range held {
		if !h {
			t.Errorf("%s not put back", ws[i].UserID)
		}
	}
}

// DefaultGrace is the reconciler's grace of both ledgers when none is
// set: how long past its time a job may be out of Redis (in the work
// queue) before the reconciler puts it back.
const DefaultGrace = time.Minute

// handOver claims what of ref's shard is due by at and acks it, as the
// poller does once SQS accepted it: from then on the work queue holds it,
// not Redis. It reports whether ref's job was among it.
func handOver(t *testing.T, b Backend, ref withdrawal.Ref, at time.Time) bool {
	t.Helper()
	ctx := context.Background()
	c, err := b.Queue.Claim(ctx, ref.Shard, at, time.Minute, delayq.MaxBatch)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, j := range c.Jobs {
		found = found || j.ID == ref.ID
		if _, err := b.Queue.Ack(ctx, ref.Shard, c.Lease, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// graceStep brings a new withdrawal w to where its job is in the work
// queue from the time it returns on, and says which count repairs it.
type graceStep func(t *testing.T, b Backend, w withdrawal.Withdrawal) (time.Time, func(ledger.Reconciliation) int)

// workQueueGrace: a job handed to the work queue is out of Redis until the
// consumer is done with it, waiting or redelivered after a failed receive.
// The reconciler leaves it alone for the grace past its time, and puts it
// back, once, after.
func workQueueGrace(step graceStep) func(t *testing.T, b Backend) {
	return func(t *testing.T, b Backend) {
		r, ok := b.Ledger.(Reconciler)
		if !ok {
			t.Skip("this backend has no reconciler")
		}
		ctx := context.Background()
		w := NewWithdrawal(b.Queue, "alice", T0)
		Create(t, b.Ledger, w)
		at, repairs := step(t, b, w)
		for _, d := range []time.Duration{0, DefaultGrace / 2, DefaultGrace - time.Millisecond} {
			if rep, err := r.Reconcile(ctx, at.Add(d)); err != nil || rep.Total() != 0 {
				t.Fatalf("pass %v after its job went to the work queue: %+v %v, want nothing (within the grace)", d, rep, err)
			}
		}
		rep, err := r.Reconcile(ctx, at.Add(DefaultGrace+time.Millisecond))
		if err != nil || rep.Total() != 1 || repairs(rep) != 1 {
			t.Fatalf("pass past the grace: %+v %v, want its one repair", rep, err)
		}
		if _, ok := jobDue(t, b, w.Ref()); !ok {
			t.Fatal("not back in Redis past the grace")
		}
	}
}

// graceDue: the job, due, went to the work queue.
func graceDue(t *testing.T, b Backend, w withdrawal.Withdrawal) (time.Time, func(ledger.Reconciliation) int) {
	if !handOver(t, b, w.Ref(), w.DueAt) {
		t.Fatal("no job due")
	}
	return w.DueAt, func(r ledger.Reconciliation) int { return r.Scheduled }
}

// graceDeadline: an attempt began and its consumer went quiet; past the
// attempt's deadline its job (the watch, or SQS's redelivery of the
// message) is in the work queue.
func graceDeadline(t *testing.T, b Backend, w withdrawal.Withdrawal) (time.Time, func(ledger.Reconciliation) int) {
	handOver(t, b, w.Ref(), w.DueAt)
	until := w.DueAt.Add(30 * time.Second)
	if _, start, _ := begin(t, b, w.Ref(), w.DueAt, until); start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	handOver(t, b, w.Ref(), until)
	return until, func(r ledger.Reconciliation) int { return r.Redispatched }
}

// graceUntold: paid, and the consumer that is to tell finance is in the
// work queue (its message redelivered).
func graceUntold(t *testing.T, b Backend, w withdrawal.Withdrawal) (time.Time, func(ledger.Reconciliation) int) {
	handOver(t, b, w.Ref(), w.DueAt)
	_, _, a := begin(t, b, w.Ref(), w.DueAt, w.DueAt.Add(30*time.Second))
	done := w.DueAt.Add(2 * time.Second)
	if _, err := b.Ledger.Finish(context.Background(), w.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, At: done}); err != nil {
		t.Fatal(err)
	}
	handOver(t, b, w.Ref(), done)
	return done, func(r ledger.Reconciliation) int { return r.Renotified }
}

// lost removes a job from its queue, due or leased.
func lost(t *testing.T, b Backend, id string) {
	t.Helper()
	ctx := context.Background()
	for n := range b.Queue.Shards() {
		if _, err := b.Queue.Cancel(ctx, n, id); err != nil {
			t.Fatal(err)
		}
		if err := b.Queue.Kill(ctx, n, id, 0, T0); err != nil && !errors.Is(err, delayq.ErrLeaseLost) {
			t.Fatal(err)
		}
	}
}

func testNotDue(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(10*time.Minute))
	Create(t, b.Ledger, w)
	// A stale job fires early (say a duplicate put in at the wrong time) and
	// is claimed: the record must not then wait for the reconciler.
	if err := b.Queue.Add(ctx, w.Shard, w.ID, T0); err != nil {
		t.Fatal(err)
	}
	if c, err := b.Queue.Claim(ctx, w.Shard, T0, time.Minute, 10); err != nil || len(c.Jobs) != 1 {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if _, start, _ := begin(t, b, w.Ref(), T0, T0.Add(time.Minute)); start != withdrawal.StartNotDue {
		t.Fatalf("begin of an early job: %v", start)
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(w.DueAt) {
		t.Fatalf("the early job is due %v (%v), want back at %v", at, ok, w.DueAt)
	}
}

func testBusyKeepsLater(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	if _, start, _ := begin(t, b, w.Ref(), T0, T0.Add(time.Minute)); start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	// The job is due later than the running attempt's deadline (a retry the
	// attempt's owner scheduled while a duplicate delivery raced it): the
	// busy delivery must not pull it forward.
	later := T0.Add(10 * time.Minute)
	if err := b.Queue.Add(ctx, w.Shard, w.ID, later); err != nil {
		t.Fatal(err)
	}
	if _, start, _ := begin(t, b, w.Ref(), T0.Add(time.Second), T0.Add(time.Minute)); start != withdrawal.StartBusy {
		t.Fatalf("second begin: %v", start)
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || !at.Equal(later) {
		t.Fatalf("job due %v (%v), want still %v", at, ok, later)
	}
}

func testTakeover2(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, dead := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	got, start, a := begin(t, b, w.Ref(), T0.Add(time.Minute), T0.Add(2*time.Minute))
	if start != withdrawal.StartAttempt || !got.MaybePaid || got.Attempts != 1 || got.Attempt != a {
		t.Fatalf("takeover: %+v %v", got, start)
	}
	// The dead attempt's call was counted with its deadline: no request of
	// it can be signed or running past that.
	if !got.SentUntil.Equal(T0.Add(time.Minute)) {
		t.Fatalf("takeover: sent until %s, want the dead attempt's deadline %s", got.SentUntil, T0.Add(time.Minute))
	}
	// The dead consumer comes back with an answer: too late, it is not its
	// attempt any more.
	if _, err := b.Ledger.Retry(ctx, w.Ref(), dead, withdrawal.RetryAt{At: T0, Now: T0, LastError: "500"}); !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("the dead attempt's retry: %v", err)
	}
	// The lookup says the provider never received it: the record forgets
	// that it may have paid, and counts the call it now sends.
	got, err := b.Ledger.Send(ctx, w.Ref(), a, T0.Add(61*time.Second), true)
	if err != nil || got.MaybePaid || got.Attempts != 2 || !got.SentUntil.Equal(T0.Add(2*time.Minute)) {
		t.Fatalf("send after a lookup of never received: %+v %v", got, err)
	}
}

func testMaybePaid(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	got, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Minute), Now: T0, LastError: "no answer", MaybePaid: true})
	if err != nil || got.Status != withdrawal.Retrying || !got.MaybePaid || got.Shown() != withdrawal.Processing {
		t.Fatalf("retry of an unanswered call: %+v %v", got, err)
	}
	got, err = b.Ledger.Cancel(ctx, "alice", w.ID, T0.Add(time.Second))
	if !errors.Is(err, withdrawal.ErrNotCancellable) || got.Status != withdrawal.Retrying {
		t.Fatalf("cancel of a withdrawal a call may have paid: %+v %v", got, err)
	}
	// A later transient answer keeps what the record knows: it may have paid.
	got, start, a := begin(t, b, w.Ref(), T0.Add(time.Minute), T0.Add(2*time.Minute))
	if start != withdrawal.StartAttempt || got.Attempts != 1 || !got.MaybePaid {
		t.Fatalf("begin: %+v %v", got, start)
	}
	if _, err := b.Ledger.Send(ctx, w.Ref(), a, T0.Add(time.Minute), false); err != nil {
		t.Fatal(err)
	}
	got, err = b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(3 * time.Minute), Now: T0.Add(time.Minute), LastError: "503"})
	if err != nil || !got.MaybePaid || got.Attempts != 2 {
		t.Fatalf("retry after a 503: %+v %v", got, err)
	}
	if _, err := b.Ledger.Cancel(ctx, "alice", w.ID, T0.Add(time.Minute)); !errors.Is(err, withdrawal.ErrNotCancellable) {
		t.Fatalf("cancel after the 503: %v", err)
	}
}

func testLostAnswers(t *testing.T, b Backend) {
	if b.Lose == nil {
		t.Skip("this backend cannot lose answers")
	}
	ctx := context.Background()
	t.Cleanup(b.Lose.Disarm)
	for _, mode := range []lostreply.Mode{lostreply.Resend} {
		w := NewWithdrawal(b.Queue, "alice", T0)
		key := withdrawal.IdemKey{UserID: w.UserID, Key: "k-" + w.ID, Shard: w.Shard}
		// Reserve: our own reservation, resent, is ours, not "in flight".
		b.Lose.Arm(mode)
		st, err := b.Ledger.Reserve(ctx, reservation(key, "fp", w.ID, T0))
		if err != nil || st.Phase != withdrawal.KeyAcquired || st.ID != w.ID {
			t.Fatalf("reserve whose answer was lost: %+v %v", st, err)
		}
		if err := b.Ledger.Create(ctx, w, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		// Begin: ours, not "busy", and counted once.
		a := withdrawal.NewAttemptID(T0)
		b.Lose.Arm(mode)
		got, start, err := b.Ledger.Begin(ctx, w.Ref(), withdrawal.Begin{Attempt: a, Now: T0, Until: T0.Add(time.Minute)})
		if err != nil || start != withdrawal.StartAttempt || got.Attempts != 1 {
			t.Fatalf("begin whose answer was lost: %+v %v %v", got, start, err)
		}
		// Retry: ours, not "stale", and the job is scheduled.
		at := T0.Add(5 * time.Minute)
		b.Lose.Arm(mode)
		got, err = b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: at, Now: T0, LastError: "no answer", MaybePaid: true})
		if err != nil || got.Status != withdrawal.Retrying || !got.MaybePaid {
			t.Fatalf("retry whose answer was lost: %+v %v", got, err)
		}
		if due, ok := jobDue(t, b, w.Ref()); !ok || !due.Equal(at) {
			t.Fatalf("after a retry whose answer was lost the job is due %v (%v), want %v", due, ok, at)
		}
		// Send and Finish: ours.
		got, start, a = begin(t, b, w.Ref(), at, at.Add(time.Minute))
		if start != withdrawal.StartAttempt {
			t.Fatalf("begin: %v", start)
		}
		b.Lose.Arm(mode)
		got, err = b.Ledger.Send(ctx, w.Ref(), a, at, false)
		if err != nil || got.Attempts != 2 {
			t.Fatalf("send whose answer was lost: %+v %v", got, err)
		}
		b.Lose.Arm(mode)
		got, err = b.Ledger.Finish(ctx, w.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, PayoutID: "po", At: at})
		if err != nil || got.Status != withdrawal.Paid {
			t.Fatalf("finish whose answer was lost: %+v %v", got, err)
		}
		// Apply: ours (applied, not a duplicate).
		b.Lose.Arm(mode)
		got, applied, err := b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: "ev-1", Status: withdrawal.Returned, At: at})
		if err != nil || applied != withdrawal.Changed || got.Status != withdrawal.Returned {
			t.Fatalf("callback whose answer was lost: %+v %v %v", got, applied, err)
		}
		// Resolve: ours (of a withdrawal a call may have paid: an
		// operator's to settle).
		w2 := NewWithdrawal(b.Queue, "bob", T0)
		Create(t, b.Ledger, w2)
		_, _, a2 := begin(t, b, w2.Ref(), T0, T0.Add(time.Minute))
		if _, err := b.Ledger.Retry(ctx, w2.Ref(), a2, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "no answer",
			MaybePaid: true}); err != nil {
			t.Fatal(err)
		}
		b.Lose.Arm(mode)
		got, err = b.Ledger.Resolve(ctx, w2.ID, withdrawal.Resolution{Status: withdrawal.Failed, Reason: "r", By: "op", At: T0})
		if err != nil || got.Status != withdrawal.Failed || got.ResolvedBy != "op" {
			t.Fatalf("resolve whose answer was lost: %+v %v", got, err)
		}
		if n := b.Lose.Lost(); n < 7 {
			t.Fatalf("only %d answers were lost; the test did not test", n)
		}
	}
}

func testResolve(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	paid := withdrawal.Resolution{Status: withdrawal.Paid, PayoutID: "po_manual", By: "ops@example.com", At: T0.Add(time.Second)}
	// While the attempt runs, its own result would be overwritten.
	if _, err := b.Ledger.Resolve(ctx, w.ID, paid); !errors.Is(err, withdrawal.ErrNotResolvable) {
		t.Fatalf("resolve while an attempt runs: %v", err)
	}
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "no answer", MaybePaid: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Queue.Cancel(ctx, w.Shard, w.ID); err != nil {
		t.Fatal(err)
	}
	got, err := b.Ledger.Resolve(ctx, w.ID, paid)
	if err != nil || got.Status != withdrawal.Paid || got.PayoutID != "po_manual" || got.ResolvedBy != "ops@example.com" ||
		!got.ResolvedAt.Equal(paid.At) || !got.ProcessedAt.Equal(paid.At) || !got.Untold() || got.MaybePaid {
		t.Fatalf("resolve: %+v %v", got, err)
	}
	// Its job is due now, so the consumer tells finance.
	if at, ok := jobDue(t, b, w.Ref()); !ok || at.After(paid.At) {
		t.Fatalf("after a resolution the job is due %v (%v), want by %v", at, ok, paid.At)
	}
	if got, err := b.Ledger.Resolve(ctx, w.ID, paid); err != nil || got.Status != withdrawal.Paid {
		t.Fatalf("the same resolution again: %+v %v", got, err)
	}
	failed := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "x", By: "ops", At: T0.Add(time.Hour)}
	if _, err := b.Ledger.Resolve(ctx, w.ID, failed); !errors.Is(err, withdrawal.ErrNotResolvable) {
		t.Fatalf("a contradicting resolution: %v", err)
	}
	if _, err := b.Ledger.Resolve(ctx, withdrawal.NewID(T0), failed); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("resolve of an unknown id: %v", err)
	}
}

func testCallbacks(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "no answer", MaybePaid: true}); err != nil {
		t.Fatal(err)
	}
	apply := func(ev string, st withdrawal.Status, want withdrawal.Status, wantApplied withdrawal.Applied) withdrawal.Withdrawal {
		t.Helper()
		got, applied, err := b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: ev, Status: st, PayoutID: "po_9", Reason: "r", At: T0.Add(time.Second)})
		if err != nil || got.Status != want || applied != wantApplied {
			t.Fatalf("callback %s (%s): %s %v %v, want %s %v", ev, st, got.Status, applied, err, want, wantApplied)
		}
		return got
	}
	got := apply("ev-1", withdrawal.Paid, withdrawal.Paid, withdrawal.Changed)
	if got.PayoutID != "po_9" || got.MaybePaid || !got.Untold() {
		t.Fatalf("after paid: %+v", got)
	}
	if at, ok := jobDue(t, b, w.Ref()); !ok || at.After(T0.Add(time.Second)) {
		t.Fatalf("after a callback the job is due %v (%v), want now: finance must hear", at, ok)
	}
	apply("ev-1", withdrawal.Paid, withdrawal.Paid, withdrawal.Duplicate)
	apply("ev-2", withdrawal.Failed, withdrawal.Paid, withdrawal.Conflict)
	apply("ev-3", withdrawal.Returned, withdrawal.Returned, withdrawal.Changed)
	apply("ev-0", withdrawal.Paid, withdrawal.Returned, withdrawal.Unchanged) // the paid that came before, late
	apply("ev-3", withdrawal.Returned, withdrawal.Returned, withdrawal.Duplicate)
	if _, _, err := b.Ledger.Apply(ctx, withdrawal.NewID(T0), withdrawal.Callback{EventID: "e", Status: withdrawal.Paid, At: T0}); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("callback for an unknown id: %v", err)
	}
	// Returned before paid ever arrived (out of order): paid, then returned.
	w2 := NewWithdrawal(b.Queue, "bob", T0)
	Create(t, b.Ledger, w2)
	begin(t, b, w2.Ref(), T0, T0.Add(time.Minute))
	if got, applied, err := b.Ledger.Apply(ctx, w2.ID, withdrawal.Callback{EventID: "x", Status: withdrawal.Returned, At: T0}); err != nil ||
		got.Status != withdrawal.Returned || applied != withdrawal.Changed {
		t.Fatalf("returned first: %+v %v %v", got, applied, err)
	}
	// A cancelled withdrawal is never made paid (one never sent:
	// testCancelledNotSent).
	w3 := NewWithdrawal(b.Queue, "carol", T0)
	Create(t, b.Ledger, w3)
	_, _, a3 := begin(t, b, w3.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Retry(ctx, w3.Ref(), a3, withdrawal.RetryAt{At: T0.Add(time.Hour), Now: T0, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Ledger.Cancel(ctx, "carol", w3.ID, T0); err != nil {
		t.Fatal(err)
	}
	if got, applied, err := b.Ledger.Apply(ctx, w3.ID, withdrawal.Callback{EventID: "y", Status: withdrawal.Paid, At: T0}); err != nil ||
		got.Status != withdrawal.Cancelled || applied != withdrawal.Conflict {
		t.Fatalf("paid after cancelled: %+v %v %v", got, applied, err)
	}
}

func testTold(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)
	_, _, a := begin(t, b, w.Ref(), T0, T0.Add(time.Minute))
	if _, err := b.Ledger.Finish(ctx, w.Ref(), a, withdrawal.Result{Status: withdrawal.Paid, At: T0}); err != nil {
		t.Fatal(err)
	}
	if err := b.Ledger.MarkNotified(ctx, w.Ref(), withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Ledger.Apply(ctx, w.ID, withdrawal.Callback{EventID: "r", Status: withdrawal.Returned, At: T0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Ledger.Get(ctx, "alice", w.ID)
	if !got.Untold() || got.Told != withdrawal.Paid {
		t.Fatalf("returned after paid was told: %+v: finance must hear of the return", got)
	}
	// A late mark of "paid" (a consumer that told finance of paid just
	// before the return) does not stand for the return.
	if err := b.Ledger.MarkNotified(ctx, w.Ref(), withdrawal.Paid); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Ledger.Get(ctx, "alice", w.ID); !got.Untold() {
		t.Fatalf("a mark of paid hid the return: %+v", got)
	}
	if err := b.Ledger.MarkNotified(ctx, w.Ref(), withdrawal.Returned); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Ledger.Get(ctx, "alice", w.ID); got.Untold() || got.Told != withdrawal.Returned {
		t.Fatalf("after telling of the return: %+v", got)
	}
}

func testFind(t *testing.T, b Backend) {
	ctx := context.Background()
	var ws []withdrawal.Withdrawal
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		w := NewWithdrawal(b.Queue, u, T0)
		Create(t, b.Ledger, w)
		ws = append(ws, w)
	}
	for _, w := range ws {
		got, err := b.Ledger.Find(ctx, w.ID)
		if err != nil || got.ID != w.ID || got.UserID != w.UserID || got.Shard != w.Shard {
			t.Fatalf("find %s: %+v %v", w.ID, got, err)
		}
	}
	if _, err := b.Ledger.Find(ctx, withdrawal.NewID(T0)); !errors.Is(err, withdrawal.ErrNotFound) {
		t.Fatalf("find of an unknown id: %v", err)
	}
	if _, err := b.Ledger.Cancel(ctx, "dave", ws[3].ID, T0); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	if err := b.Ledger.Outstanding(ctx, func(w withdrawal.Withdrawal) error { seen[w.ID] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !seen[ws[0].ID] || !seen[ws[1].ID] || !seen[ws[2].ID] || seen[ws[3].ID] {
		t.Fatalf("outstanding %v: want the three not cancelled", seen)
	}
}

// testRequestID: the create's request id (the correlation id of the logs)
// comes back with every read and every write's answer; a record without one
// (written before ids were kept) reads back empty.
func testRequestID(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0)
	w.RequestID = "req-create-1"
	Create(t, b.Ledger, w)
	old := NewWithdrawal(b.Queue, "bob", T0)
	Create(t, b.Ledger, old)

	check := func(step string, got withdrawal.Withdrawal, want string) {
		t.Helper()
		if got.RequestID != want {
			t.Errorf("%s of %s: request id %q, want %q", step, got.ID, got.RequestID, want)
		}
	}
	for _, c := range []struct {
		w    withdrawal.Withdrawal
		want string
	}{{w, "req-create-1"}, {old, ""}} {
		got, err := b.Ledger.Get(ctx, c.w.UserID, c.w.ID)
		if err != nil {
			t.Fatal(err)
		}
		check("get", got, c.want)
		if got, err = b.Ledger.Find(ctx, c.w.ID); err != nil {
			t.Fatal(err)
		}
		check("find", got, c.want)
		list, err := b.Ledger.List(ctx, c.w.UserID, 10, "")
		if err != nil || len(list) != 1 {
			t.Fatalf("list: %v %v", list, err)
		}
		check("list", list[0], c.want)
		got, _, attempt := begin(t, b, c.w.Ref(), T0, T0.Add(time.Minute))
		check("begin", got, c.want)
		if got, err = b.Ledger.Retry(ctx, c.w.Ref(), attempt, withdrawal.RetryAt{At: T0, Now: T0, LastError: "503"}); err != nil {
			t.Fatal(err)
		}
		check("retry", got, c.want)
		_, _, attempt = begin(t, b, c.w.Ref(), T0.Add(time.Second), T0.Add(time.Minute))
		if got, err = b.Ledger.Finish(ctx, c.w.Ref(), attempt, withdrawal.Result{Status: withdrawal.Paid, PayoutID: "po", At: T0}); err != nil {
			t.Fatal(err)
		}
		check("finish", got, c.want)
		got, _, err = b.Ledger.Apply(ctx, c.w.ID, withdrawal.Callback{EventID: "ev-" + c.w.ID, Status: withdrawal.Returned, At: T0})
		if err != nil {
			t.Fatal(err)
		}
		check("callback", got, c.want)
	}
}

// testReplayAfterChanges: a key replayed after its withdrawal moved on (its
// due time moved, a retry, a cancel) answers the first answer still, byte
// for byte.
func testReplayAfterChanges(t *testing.T, b Backend) {
	ctx := context.Background()
	w := NewWithdrawal(b.Queue, "alice", T0.Add(time.Minute))
	w.RequestID = "req-first"
	key := withdrawal.IdemKey{UserID: w.UserID, Key: "replayed", Shard: w.Shard}
	if st, err := b.Ledger.Reserve(ctx, reservation(key, "fp", w.ID, T0)); err != nil || st.Phase != withdrawal.KeyAcquired {
		t.Fatalf("reserve: %+v %v", st, err)
	}
	first, err := withdrawal.EncodeCreated(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Ledger.Create(ctx, w, key, first); err != nil {
		t.Fatal(err)
	}
	replay := func(step string) {
		t.Helper()
		st, err := b.Ledger.Reserve(ctx, reservation(key, "fp", "wd_again", T0.Add(time.Second)))
		if err != nil || st.Phase != withdrawal.KeyCompleted || st.ID != w.ID {
			t.Fatalf("replay after %s: %+v %v", step, st, err)
		}
		if diff := cmp.Diff(string(first), string(st.Response)); diff != "" {
			t.Fatalf("replay after %s (-first +replay):\n%s", step, diff)
		}
	}
	replay("the create")
	if _, err := reschedule(b, w, T0.Add(time.Hour), T0.Add(time.Second), nil); err != nil {
		t.Fatal(err)
	}
	replay("a reschedule")
	_, start, a := begin(t, b, w.Ref(), T0.Add(time.Hour), T0.Add(time.Hour+time.Minute))
	if start != withdrawal.StartAttempt {
		t.Fatalf("begin: %v", start)
	}
	if _, err := b.Ledger.Retry(ctx, w.Ref(), a, withdrawal.RetryAt{At: T0.Add(2 * time.Hour), Now: T0.Add(time.Hour),
		LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	replay("a retry")
	if _, err := b.Ledger.Cancel(ctx, w.UserID, w.ID, T0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	replay("a cancel")
}
