package httpapi

import (
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// OperatorView is a withdrawal as operators see it (the CLI, the local
// dashboard): the API's fields and the internal ones (the ledger's status,
// the full last error, who rescheduled or resolved it, the callbacks
// applied). Never shown to the user.
type OperatorView struct {
	View
	UserID           string `json:"user_id"`
	Revision         int64  `json:"revision"`
	MayHavePaid      bool   `json:"may_have_paid"`
	FullLastError    string `json:"full_last_error,omitempty"`
	RequestID        string `json:"request_id,omitempty"`
	RescheduledBy    string `json:"rescheduled_by,omitempty"`
	RescheduleReason string `json:"reschedule_reason,omitempty"`
	RescheduledAt    string `json:"rescheduled_at,omitempty"`
	RescheduledFrom  string `json:"rescheduled_from,omitempty"`
	ResolvedBy       string `json:"resolved_by,omitempty"`
	ResolvedAt       string `json:"resolved_at,omitempty"`
	FirstSentAt      string `json:"first_sent_at,omitempty"`
	ProcessedAt      string `json:"processed_at,omitempty"`
	// FinanceTold is the outcome finance was last told of ("" for none).
	FinanceTold withdrawal.Status `json:"finance_told,omitempty"`
	// Callbacks are the ids of the provider callbacks applied, oldest
	// first (the last few of them).
	Callbacks []string `json:"callbacks,omitempty"`
}

// OperatorViewOf is w as operators see it.
func OperatorViewOf(w withdrawal.Withdrawal) OperatorView {
	v := OperatorView{View: ViewOf(w), UserID: w.UserID, Revision: w.Revision, MayHavePaid: w.MaybePaid,
		FullLastError: w.LastError, RequestID: w.RequestID, RescheduledBy: w.RescheduledBy,
		RescheduleReason: w.RescheduleReason, ResolvedBy: w.ResolvedBy, FinanceTold: w.Told, Callbacks: w.Events}
	v.Status = w.Status // the ledger's status, not the one the user is shown
	for _, t := range []struct {
		at  time.Time
		dst *string
	}{
		{w.RescheduledAt, &v.RescheduledAt}, {w.RescheduledFrom, &v.RescheduledFrom}, {w.ResolvedAt, &v.ResolvedAt},
		{w.FirstSentAt, &v.FirstSentAt}, {w.ProcessedAt, &v.ProcessedAt},
	} {
		if !t.at.IsZero() {
			*t.dst = clock.Format(t.at)
		}
	}
	return v
}
