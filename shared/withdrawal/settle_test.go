package withdrawal_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestNeverSent: only a withdrawal no payout request may have left is
// never sent; a processing one may have sent (its attempt counts the call
// as it begins), and so may any that was counted, stamped or may have paid.
func TestNeverSent(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		w    withdrawal.Withdrawal
		want bool
	}{
		{"scheduled", withdrawal.Withdrawal{Status: withdrawal.Scheduled}, true},
		{"cancelled before any call", withdrawal.Withdrawal{Status: withdrawal.Cancelled}, true},
		{"retrying with no call", withdrawal.Withdrawal{Status: withdrawal.Retrying}, true},
		{"processing, its first attempt begun", withdrawal.Withdrawal{Status: withdrawal.Processing}, false},
		{"retrying after a call", withdrawal.Withdrawal{Status: withdrawal.Retrying, Attempts: 1, FirstSentAt: t0}, false},
		{"cancelled after a call", withdrawal.Withdrawal{Status: withdrawal.Cancelled, Attempts: 1, FirstSentAt: t0}, false},
		{"first send stamped only", withdrawal.Withdrawal{Status: withdrawal.Retrying, FirstSentAt: t0}, false},
		{"may have paid", withdrawal.Withdrawal{Status: withdrawal.Retrying, MaybePaid: true}, false},
		{"paid", withdrawal.Withdrawal{Status: withdrawal.Paid}, false},
	} {
		if got := c.w.NeverSent(); got != c.want {
			t.Errorf("%s: NeverSent %v, want %v", c.name, got, c.want)
		}
	}
}

// TestUnresolvable: an operator settles only what nothing else can: not
// final, no attempt running, and a call may have paid it; or, as failed
// only, one no call may have paid that retries past the attempts. Every
// refusal names its reason.
func TestUnresolvable(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	paid := withdrawal.Resolution{Status: withdrawal.Paid, PayoutID: "po", By: "ops", At: t0, MaxAttempts: 3}
	failed := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "r", By: "ops", At: t0, MaxAttempts: 3}
	sent := func(st withdrawal.Status, attempts int, maybe bool) withdrawal.Withdrawal {
		return withdrawal.Withdrawal{Status: st, Attempts: attempts, FirstSentAt: t0.Add(-time.Hour), MaybePaid: maybe}
	}
	running := sent(withdrawal.Processing, 1, true)
	running.ProcessingUntil = t0.Add(time.Minute)
	overdue := sent(withdrawal.Processing, 1, false)
	overdue.ProcessingUntil = t0.Add(-time.Minute)
	for _, c := range []struct {
		name string
		w    withdrawal.Withdrawal
		r    withdrawal.Resolution
		why  string // "" when it may be resolved, else a part of the reason
	}{
		{"scheduled, as paid", withdrawal.Withdrawal{Status: withdrawal.Scheduled}, paid, "never sent"},
		{"scheduled, as failed", withdrawal.Withdrawal{Status: withdrawal.Scheduled}, failed, "never sent"},
		{"scheduled past the attempts' count", withdrawal.Withdrawal{Status: withdrawal.Scheduled}, withdrawal.Resolution{
			Status: withdrawal.Failed, Reason: "r", At: t0, MaxAttempts: 0}, "never sent"},
		{"cancelled", withdrawal.Withdrawal{Status: withdrawal.Cancelled}, failed, "cancelled already"},
		{"paid", sent(withdrawal.Paid, 1, false), failed, "paid already"},
		{"an attempt runs", running, paid, "attempt runs"},
		{"may have paid, as paid", sent(withdrawal.Retrying, 8, true), paid, ""},
		{"may have paid, as failed", sent(withdrawal.Retrying, 1, true), failed, ""},
		{"may have paid, its attempt overdue", func() withdrawal.Withdrawal { w := overdue; w.MaybePaid = true; return w }(), paid, ""},
		{"an attempt overdue, no call that may have paid", overdue, failed, "next attempt"},
		{"retrying under the attempts", sent(withdrawal.Retrying, 2, false), failed, "2 of 3 attempts"},
		{"retrying past the attempts, as failed", sent(withdrawal.Retrying, 3, false), failed, ""},
		{"retrying past the attempts, as paid", sent(withdrawal.Retrying, 5, false), paid, "cannot be resolved as paid"},
		{"retrying, no maximum given", sent(withdrawal.Retrying, 5, false), withdrawal.Resolution{Status: withdrawal.Failed,
			Reason: "r", At: t0}, "payout step settles it"},
	} {
		got := withdrawal.Unresolvable(c.w, c.r)
		if (c.why == "") != (got == "") || !strings.Contains(got, c.why) {
			t.Errorf("%s: Unresolvable %q, want %q", c.name, got, c.why)
		}
	}
}

// A resolution judged on an older revision of the record (the operator
// stalled while the payout step sent the request again) is refused and
// writes nothing; on the revision judged it applies.
func TestResolutionOnTheRevisionJudged(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	w := withdrawal.Withdrawal{ID: "wd_1", Status: withdrawal.Retrying, MaybePaid: true, Attempts: 2, Revision: 5}
	judged := int64(4)
	r := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "not at the provider", By: "ops", At: t0, IfRevision: &judged}
	d := withdrawal.Decide(w, r)
	if !errors.Is(d.Err, withdrawal.ErrPreconditionFailed) || d.Write || len(d.Queue) > 0 || d.Tell {
		t.Fatalf("a resolution judged on revision 4 of a record at 5: %+v", d)
	}
	judged = 5
	if d := withdrawal.Decide(w, r); d.Err != nil || !d.Write || d.Next.Status != withdrawal.Failed {
		t.Fatalf("a resolution judged on the record's revision: %+v", d)
	}
}
