package ops

import (
	"context"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// What operators do with payouts the system cannot settle itself, for every
// front end (the CLI's "hourglass payouts", the local dashboard).

// Unresolved is a withdrawal that needs an operator's eye, as operators
// see it.
type Unresolved struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Revision is what a resolution names: the verdict is taken only if
	// the record has not moved since.
	Revision    int64  `json:"revision"`
	MayHavePaid bool   `json:"may_have_paid"`
	Attempts    int    `json:"attempts"`
	FirstSentAt string `json:"first_sent_at,omitempty"`
	NextAt      string `json:"next_attempt_at"`
	// PastWindow: first sent longer ago than the provider remembers keys:
	// it is never sent again blind.
	PastWindow bool   `json:"past_idempotency_window"`
	LastError  string `json:"last_error"`
	// RequestID is the create's request id: search the logs by it.
	RequestID string `json:"request_id,omitempty"`
	// Record is the withdrawal as it stands.
	Record withdrawal.Withdrawal `json:"-"`
}

// ListUnresolved lists the withdrawals an operator may have to settle
// (withdrawal.Service.Unresolved), judged at now against the provider's
// idempotency window.
func ListUnresolved(ctx context.Context, svc *withdrawal.Service, maxAttempts int, window time.Duration,
	now time.Time) ([]Unresolved, error) {
	ws, err := svc.Unresolved(ctx, maxAttempts)
	if err != nil {
		return nil, err
	}
	rows := make([]Unresolved, 0, len(ws))
	for _, w := range ws {
		r := Unresolved{ID: w.ID, Status: string(w.Status), Revision: w.Revision, MayHavePaid: w.MaybePaid, Attempts: w.Attempts,
			NextAt: clock.Format(w.DueAt), LastError: w.LastError, RequestID: w.RequestID, Record: w}
		if !w.FirstSentAt.IsZero() {
			r.FirstSentAt = clock.Format(w.FirstSentAt)
			r.PastWindow = now.Sub(w.FirstSentAt) > window
		}
		if w.Status == withdrawal.Processing {
			r.NextAt = clock.Format(w.ProcessingUntil)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// Verdict is an operator's resolution of a withdrawal: paid with the
// provider's payout id, or failed with a reason, judged on a revision.
type Verdict struct {
	PayoutID string
	Reason   string
	By       string
	// Revision is the record's revision as judged; nil is refused.
	Revision *int64
}

// Resolve settles withdrawal id by verdict v through the same guards
// everywhere (withdrawal.Service.Resolve): exactly one of a payout id and a
// reason, a revision the record still has, a withdrawal that is an
// operator's to settle. Refusals write nothing: withdrawal.ErrNotFound,
// ErrPreconditionFailed (it moved since), ErrNotResolvable (with why), a
// *validation.Error.
func Resolve(ctx context.Context, svc *withdrawal.Service, id string, v Verdict, maxAttempts int) (withdrawal.Withdrawal, error) {
	if (v.PayoutID == "") == (v.Reason == "") {
		return withdrawal.Withdrawal{}, validation.New("payout_id",
			"give exactly one of the provider's payout id (paid) and a reason (failed)")
	}
	r := withdrawal.Resolution{Status: withdrawal.Paid, PayoutID: v.PayoutID, By: v.By, IfRevision: v.Revision,
		MaxAttempts: maxAttempts}
	if v.PayoutID == "" && v.Reason != "" {
		r = withdrawal.Resolution{Status: withdrawal.Failed, Reason: v.Reason, By: v.By, IfRevision: v.Revision,
			MaxAttempts: maxAttempts}
	}
	return svc.Resolve(ctx, id, r)
}
