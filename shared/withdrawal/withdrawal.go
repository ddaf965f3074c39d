// Package withdrawal is the withdrawal domain: what a withdrawal is, the rules a
// request must follow, the state machine, idempotent creation, cancellation and
// the payout step. It knows nothing of Lambda, HTTP or Redis; it states what it
// needs as small interfaces (Ledger, Provider, Notifier) that adapters implement.
package withdrawal

import (
	"errors"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
)

// Status is a withdrawal's place in its life.
//
//	scheduled ──> processing ──> paid
//	    │   ^         │  └─────> failed
//	    │   └retrying<┘
//	    └─> cancelled <── retrying
//
// Only scheduled and retrying withdrawals can be cancelled: once one is handed
// to the payout step (processing) the user can no longer take it back.
type Status string

// The statuses of SPEC.md.
const (
	Scheduled  Status = "scheduled"
	Processing Status = "processing"
	Retrying   Status = "retrying"
	Paid       Status = "paid"
	Failed     Status = "failed"
	Cancelled  Status = "cancelled"
)

// Final reports whether no transition leaves s.
func (s Status) Final() bool { return s == Paid || s == Failed || s == Cancelled }

// Cancellable reports whether a withdrawal in s may still be cancelled.
func (s Status) Cancellable() bool { return s == Scheduled || s == Retrying }

// Queue and job kind of withdrawal payouts.
const (
	QueueName = "withdrawals"
	JobKind   = "withdrawal.payout"
)

// Withdrawal is the ledger's record of one withdrawal.
type Withdrawal struct {
	ID     string
	UserID string
	// Shard is the delay-queue shard the withdrawal is scheduled on.
	Shard       int
	Status      Status
	Amount      decimal.Decimal
	Currency    string
	Destination string
	DueAt       time.Time
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// Attempts counts calls made to the payout provider, the successful one too.
	Attempts  int
	LastError string
	PayoutID  string
	// ProcessedAt is when the withdrawal became paid or failed.
	ProcessedAt time.Time
	// ProcessingUntil bounds a payout attempt: past it, another consumer may
	// take the withdrawal over (the first one died).
	ProcessingUntil time.Time
	// Notified is set once finance has been told of the final outcome.
	Notified bool
}

// Ref locates a withdrawal for the payout step, which knows no user.
type Ref struct {
	Shard int
	ID    string
}

// Ref returns the withdrawal's Ref.
func (w Withdrawal) Ref() Ref { return Ref{Shard: w.Shard, ID: w.ID} }

// View is a withdrawal as the HTTP API shows it.
type View struct {
	ID          string  `json:"id"`
	Status      Status  `json:"status"`
	Amount      string  `json:"amount"`
	Currency    string  `json:"currency"`
	Destination string  `json:"destination"`
	DueAt       string  `json:"due_at"`
	CreatedAt   string  `json:"created_at"`
	UpdatedAt   string  `json:"updated_at"`
	Attempts    int     `json:"attempts"`
	LastError   *string `json:"last_error"`
	PayoutID    *string `json:"payout_id"`
}

// View returns the API representation of w.
func (w Withdrawal) View() View {
	v := View{
		ID:          w.ID,
		Status:      w.Status,
		Amount:      FormatAmount(w.Amount, w.Currency),
		Currency:    w.Currency,
		Destination: w.Destination,
		DueAt:       clock.Format(w.DueAt),
		CreatedAt:   clock.Format(w.CreatedAt),
		UpdatedAt:   clock.Format(w.UpdatedAt),
		Attempts:    w.Attempts,
	}
	if w.LastError != "" {
		v.LastError = &w.LastError
	}
	if w.PayoutID != "" {
		v.PayoutID = &w.PayoutID
	}
	return v
}

// Processed is the message finance receives for every paid or failed payout.
// WithdrawalID is its de-duplication key: finance may see one more than once.
type Processed struct {
	Type         string `json:"type"`
	WithdrawalID string `json:"withdrawal_id"`
	UserID       string `json:"user_id"`
	Status       Status `json:"status"`
	Amount       string `json:"amount"`
	Currency     string `json:"currency"`
	Destination  string `json:"destination"`
	PayoutID     string `json:"payout_id"`
	Attempts     int    `json:"attempts"`
	ProcessedAt  string `json:"processed_at"`
}

// ProcessedType is the Type of every Processed message.
const ProcessedType = "payout.processed"

// Processed returns the finance message for a paid or failed withdrawal.
func (w Withdrawal) Processed() Processed {
	return Processed{
		Type:         ProcessedType,
		WithdrawalID: w.ID,
		UserID:       w.UserID,
		Status:       w.Status,
		Amount:       FormatAmount(w.Amount, w.Currency),
		Currency:     w.Currency,
		Destination:  w.Destination,
		PayoutID:     w.PayoutID,
		Attempts:     w.Attempts,
		ProcessedAt:  clock.Format(w.ProcessedAt),
	}
}

// Domain outcomes, mapped to HTTP problems at the edge.
var (
	ErrNotFound = errors.New("withdrawal: not found")
	// ErrNotCancellable: the withdrawal was handed to the payout step or is final.
	ErrNotCancellable = errors.New("withdrawal: not cancellable")
	// ErrIdempotencyConflict: the key was used for another request body.
	ErrIdempotencyConflict = errors.New("withdrawal: idempotency key reused with another request")
	// ErrIdempotencyInFlight: the first request with the key is still running.
	ErrIdempotencyInFlight = errors.New("withdrawal: request with this idempotency key in flight")
	// ErrPermanent marks a provider answer that no retry can change.
	ErrPermanent = errors.New("withdrawal: payout refused")
	// ErrOutcomeUnknown marks a payout call that got no answer after it may
	// have reached the provider (a timeout, a dropped connection): it may
	// have paid. Such a withdrawal is never failed; it is asked again, under
	// the same idempotency key, until the provider answers.
	ErrOutcomeUnknown = errors.New("withdrawal: payout outcome unknown")
	// ErrExists: a record with this id exists already.
	ErrExists = errors.New("withdrawal: exists")
	// ErrReservationLost: the idempotency reservation expired and was taken over.
	ErrReservationLost = errors.New("withdrawal: idempotency reservation lost")
	// ErrStale: the attempt was taken over by another consumer; its result is
	// not recorded (the other consumer records its own).
	ErrStale = errors.New("withdrawal: attempt superseded")
)
