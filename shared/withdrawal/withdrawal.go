// Package withdrawal is the withdrawal domain: what a withdrawal is, the rules a
// request must follow, the state machine, idempotent creation, cancellation and
// the payout step. It knows nothing of Lambda, HTTP or Redis; it states what it
// needs as small interfaces (Ledger, Provider, Notifier) that adapters implement.
package withdrawal

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/money"
)

// Status is a withdrawal's place in its life.
//
//	scheduled ──> processing ──> paid ──> returned
//	    │   ^         │  └─────> failed
//	    │   └retrying<┘
//	    └─> cancelled <── retrying (no call that may have paid)
//
// Only scheduled and retrying withdrawals can be cancelled, and a retrying one
// only while no call to the provider may have paid it: once one is handed to
// the payout step (processing) the user can no longer take it back. A
// withdrawal whose call got no answer (it may have paid) shows the user
// processing until an authoritative answer settles it, however long it
// retries. Returned: paid, then the provider reported that the money came
// back.
type Status string

// The statuses of SPEC.md.
const (
	Scheduled  Status = "scheduled"
	Processing Status = "processing"
	Retrying   Status = "retrying"
	Paid       Status = "paid"
	Failed     Status = "failed"
	Cancelled  Status = "cancelled"
	Returned   Status = "returned"
)

// Final reports whether no payout step leaves s (only a provider's callback
// moves paid on to returned).
func (s Status) Final() bool { return s == Paid || s == Failed || s == Cancelled || s == Returned }

// Reported reports whether finance hears of a withdrawal that ends in s.
func (s Status) Reported() bool { return s == Paid || s == Failed || s == Returned }

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
	Attempts int
	// LastError is the last payout error in full (the provider's answer, our
	// provider URL): for operators (logs, the CLI) only. The API shows
	// PublicError instead.
	LastError string
	PayoutID  string
	// ProcessedAt is when the withdrawal became paid or failed.
	ProcessedAt time.Time
	// ProcessingUntil bounds a payout attempt: past it, another consumer may
	// take the withdrawal over (the first one died).
	ProcessingUntil time.Time
	// Told is the outcome finance was last told of ("" for none): finance
	// hears of each of paid, failed and returned once it is the status.
	Told Status
	// MaybePaid is set for good once a call to the provider may have paid
	// (no answer came after the request may have left, a consumer died in
	// the middle of a call, the provider said it is still processing the
	// key), until an authoritative answer settles it (a lookup, a callback,
	// a 2xx, a definitive refusal, an operator). While it is set the
	// withdrawal is never failed and never cancelled.
	MaybePaid bool
	// FirstSentAt is when the first payout request may have left: providers
	// forget idempotency keys, so a request first sent longer ago than the
	// idempotency window is never sent again blind.
	FirstSentAt time.Time
	// SentUntil is the deadline of the last attempt that sent (or may have
	// sent) a payout request: no request of ours is signed or in flight
	// past it (the deadline bounds every call), so a request still on its
	// way reaches the provider no later than SentUntil plus the provider's
	// signature tolerance. A lookup's "never received" proves nothing
	// before then (see ProcessorConfig.NeverReceivedAfter). Zero on
	// records written before it was kept (see SentBy).
	SentUntil time.Time
	// Attempt names the payout attempt under way (or the last one): only its
	// owner may record its result.
	Attempt string
	// Op names the record's last write (ledgers use it to recognise a write
	// of their own whose answer was lost, and as a version).
	Op string
	// ResolvedBy and ResolvedAt say which operator settled the withdrawal by
	// hand (hourglass payouts resolve), and when.
	ResolvedBy string
	ResolvedAt time.Time
	// RequestID is the request id of the create (API Gateway's), the
	// correlation id every log line and message about the withdrawal
	// carries; empty on records written before it was kept.
	RequestID string
	// Revision counts the record's writes: every ledger write adds one (a
	// create is revision 0, as is a record written before revisions were
	// kept). The ETag is made of it.
	Revision int64
	// RescheduledBy, RescheduleReason, RescheduledAt and RescheduledFrom say
	// who moved the due time last ("user" for its owner, else the
	// operator), why (an operator's reason), when, and from what due time:
	// for operators (the CLI, logs) only, never in the API.
	RescheduledBy    string
	RescheduleReason string
	RescheduledAt    time.Time
	// RescheduledFrom is the due time the last reschedule moved it from.
	RescheduledFrom time.Time
	// Events are the ids of the provider callbacks applied, oldest first,
	// the last KeptEvents of them: a callback sent again is told apart.
	Events []string
}

// Reschedulable reports whether w's due time may still be moved: the same
// states as Cancellable (scheduled, or retrying with no call that may have
// paid); once it is handed to the payout step its time has come.
func (w Withdrawal) Reschedulable() bool { return w.Cancellable() }

// ETag is the entity tag of w's representation: a quoted opaque string of
// its id and revision, so that it changes with every write of the record.
func (w Withdrawal) ETag() string { return ETagOf(w.ID, w.Revision) }

// ETagOf is the entity tag of withdrawal id at revision rev.
func ETagOf(id string, rev int64) string { return `"` + id + "." + strconv.FormatInt(rev, 10) + `"` }

// Cancellable reports whether w may still be cancelled: it is scheduled or
// retrying, and no call to the provider may have paid it.
func (w Withdrawal) Cancellable() bool {
	return (w.Status == Scheduled || w.Status == Retrying) && !w.MaybePaid
}

// SentBy is the time by which every payout request of w's attempts was
// signed and its call ended: SentUntil, or for a record written before
// SentUntil was kept, its last write plus attempt (the longest an attempt
// can last), which bounds any attempt that sent before it. Zero when no
// request was ever counted.
func (w Withdrawal) SentBy(attempt time.Duration) time.Time {
	switch {
	case !w.SentUntil.IsZero():
		return w.SentUntil
	case w.FirstSentAt.IsZero() && w.Attempts == 0:
		return time.Time{}
	}
	last := w.UpdatedAt
	if w.FirstSentAt.After(last) {
		last = w.FirstSentAt
	}
	return last.Add(attempt)
}

// NeverSent reports whether no payout request for w may have left: it is
// scheduled, retrying or cancelled, no call was counted or stamped, and
// none may have paid. A processing withdrawal may have sent (its attempt
// counts the call as it begins it), and so may a paid, failed or returned
// one. A provider's callback about a never-sent withdrawal is refused
// (ErrNotSent), and so is an operator's resolution. Decide judges it on
// the record a commit writes only if it is still at the revision read.
func (w Withdrawal) NeverSent() bool {
	return (w.Status == Scheduled || w.Status == Retrying || w.Status == Cancelled) &&
		w.Attempts == 0 && w.FirstSentAt.IsZero() && !w.MaybePaid
}

// Untold reports whether finance has yet to hear of w's outcome.
func (w Withdrawal) Untold() bool { return w.Status.Reported() && w.Told != w.Status }

// Shown is the status the user sees: a retrying withdrawal whose call may
// have paid is processing to them (they can no longer cancel it).
func (w Withdrawal) Shown() Status {
	if w.Status == Retrying && w.MaybePaid {
		return Processing
	}
	return w.Status
}

// Ref locates a withdrawal for the payout step, which knows no user.
type Ref struct {
	Shard int
	ID    string
}

// Ref returns the withdrawal's Ref.
func (w Withdrawal) Ref() Ref { return Ref{Shard: w.Shard, ID: w.ID} }

// created is the stored form of a create's first answer, which a replay
// of its idempotency key answers again: the fields of the withdrawal as its
// create made it. Its JSON is that of the API's view (shared/httpapi) when
// it was introduced, so that keys stored before views moved out of this
// package read the same; it is a storage format, frozen, whatever the
// view becomes.
type created struct {
	ID          string `json:"id"`
	Status      Status `json:"status"`
	Amount      string `json:"amount"`
	Currency    string `json:"currency"`
	Destination string `json:"destination"`
	DueAt       string `json:"due_at"`
	CreatedAt   string `json:"created_at"`
	UpdatedAt   string `json:"updated_at"`
}

// EncodeCreated is the stored form of the create of w (see AsCreated): what
// a ledger keeps with the idempotency key, if it keeps anything.
func EncodeCreated(w Withdrawal) ([]byte, error) {
	b, err := json.Marshal(created{ID: w.ID, Status: Scheduled, Amount: money.Format(w.Amount, w.Currency),
		Currency: w.Currency, Destination: w.Destination, DueAt: clock.Format(w.DueAt),
		CreatedAt: clock.Format(w.CreatedAt), UpdatedAt: clock.Format(w.UpdatedAt)})
	if err != nil {
		return nil, fmt.Errorf("withdrawal: encode the created withdrawal: %w", err)
	}
	return b, nil
}

// DecodeCreated reads what EncodeCreated stored, for key: the withdrawal as
// its create made it.
func DecodeCreated(b []byte, key IdemKey) (Withdrawal, error) {
	var c created
	if err := json.Unmarshal(b, &c); err != nil {
		return Withdrawal{}, fmt.Errorf("withdrawal: decode the created withdrawal: %w", err)
	}
	amount, err := decimal.NewFromString(c.Amount)
	if err != nil {
		return Withdrawal{}, fmt.Errorf("withdrawal: decode the created withdrawal %s: amount %q: %w", c.ID, c.Amount, err)
	}
	w := Withdrawal{ID: c.ID, UserID: key.UserID, Shard: key.Shard, Status: Scheduled, Amount: amount,
		Currency: c.Currency, Destination: c.Destination}
	for _, f := range []struct {
		text string
		dst  *time.Time
	}{{c.DueAt, &w.DueAt}, {c.CreatedAt, &w.CreatedAt}, {c.UpdatedAt, &w.UpdatedAt}} {
		if *f.dst, err = time.Parse(time.RFC3339Nano, f.text); err != nil {
			return Withdrawal{}, fmt.Errorf("withdrawal: decode the created withdrawal %s: %w", c.ID, err)
		}
		*f.dst = f.dst.UTC()
	}
	return w, nil
}

// AsCreated is w as its create made it, due at due (the record's due time
// moves with a reschedule or a retry): the withdrawal a create's answer
// shows. Only what a create sets is kept, so a ledger that does not store
// the first answer rebuilds it from the record (w.AsCreated(due)).
func (w Withdrawal) AsCreated(due time.Time) Withdrawal {
	return Withdrawal{
		ID: w.ID, UserID: w.UserID, Shard: w.Shard, Status: Scheduled,
		Amount: w.Amount, Currency: w.Currency, Destination: w.Destination,
		DueAt: due, CreatedAt: w.CreatedAt, UpdatedAt: w.CreatedAt, RequestID: w.RequestID,
	}
}

// The reasons the API gives for a payout that did not go through (View's
// last_error): one fixed sentence per outcome class, never the provider's
// own answer, which can carry its hosts, our provider URL, account numbers.
// api/openapi.yaml lists them.
const (
	// ReasonNotMade: failed (refused by the provider, retries used up, or
	// settled as failed by an operator); no call may have paid it.
	ReasonNotMade = "The payout was not made: the payout provider refused it or could not be reached after every attempt. No money was sent."
	// ReasonUnavailable: the last call got an answer that is no verdict (the
	// provider down or busy); another attempt is scheduled.
	ReasonUnavailable = "The payout provider could not be reached; the payout will be tried again."
	// ReasonUnconfirmed: a call may have paid and the provider has not said
	// how it ended; it is asked again, and nothing is paid twice.
	ReasonUnconfirmed = "The payout provider has not confirmed the outcome yet; it is being checked and will not be paid twice."
	// ReasonReturned: paid, then the provider reported the money came back.
	ReasonReturned = "The payout provider reported that the money came back."
)

// PublicError is the reason the API shows for w's last payout error: empty
// when there is none (or it no longer matters: paid, cancelled), else the
// fixed sentence of its outcome class.
func (w Withdrawal) PublicError() string {
	switch {
	case w.LastError == "" || w.Status == Paid || w.Status == Cancelled:
		return ""
	case w.Status == Failed:
		return ReasonNotMade
	case w.Status == Returned:
		return ReasonReturned
	case w.MaybePaid:
		return ReasonUnconfirmed
	}
	return ReasonUnavailable
}

// Processed is the message finance receives for every paid, failed or
// returned payout.
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
	// RequestID is the request id of the create (absent for withdrawals
	// created before it was kept): the id to search the logs by.
	RequestID string `json:"request_id,omitempty"`
}

// ProcessedType is the Type of every Processed message.
const ProcessedType = "payout.processed"

// Processed returns the finance message for a paid, failed or returned
// withdrawal.
func (w Withdrawal) Processed() Processed {
	return Processed{
		Type:         ProcessedType,
		WithdrawalID: w.ID,
		UserID:       w.UserID,
		Status:       w.Status,
		Amount:       money.Format(w.Amount, w.Currency),
		Currency:     w.Currency,
		Destination:  w.Destination,
		PayoutID:     w.PayoutID,
		Attempts:     w.Attempts,
		ProcessedAt:  clock.Format(w.ProcessedAt),
		RequestID:    w.RequestID,
	}
}

// Domain outcomes, mapped to HTTP problems at the edge.
var (
	ErrNotFound = errors.New("withdrawal: not found")
	// ErrNotCancellable: the withdrawal was handed to the payout step, a call
	// may have paid it, or it is final.
	ErrNotCancellable = errors.New("withdrawal: not cancellable")
	// ErrNotReschedulable: the withdrawal is no longer scheduled (or
	// retrying with no call that may have paid), so its time cannot move.
	ErrNotReschedulable = errors.New("withdrawal: not reschedulable")
	// ErrPreconditionFailed: the record is not at the revision the caller
	// named (If-Match); nothing was changed.
	ErrPreconditionFailed = errors.New("withdrawal: precondition failed")
	// ErrNotResolvable: an operator's resolution does not apply (the
	// withdrawal ended otherwise, an attempt is running right now, or no
	// call may have paid it, so the payout step settles it itself); the
	// error names the reason.
	ErrNotResolvable = errors.New("withdrawal: not resolvable")
	// ErrNotSent: a provider's callback is about a withdrawal that was
	// never sent to the provider (NeverSent): it changes nothing, its event
	// is not kept, and operators are alerted.
	ErrNotSent = errors.New("withdrawal: never sent to the provider")
	// ErrIdempotencyConflict: the key was used for another request body.
	ErrIdempotencyConflict = errors.New("withdrawal: idempotency key reused with another request")
	// ErrIdempotencyInFlight: the first request with the key is still running.
	ErrIdempotencyInFlight = errors.New("withdrawal: request with this idempotency key in flight")
	// ErrPermanent marks a provider answer that no retry can change.
	ErrPermanent = errors.New("withdrawal: payout refused")
	// ErrOutcomeUnknown marks a payout call that got no answer after it may
	// have reached the provider (a timeout, a dropped connection), or one the
	// provider answered "still processing this key" (409): it may have paid.
	// Such a withdrawal is never failed; it is settled by a lookup, a
	// callback or an operator, and asked again under the same idempotency
	// key while the provider still knows it.
	ErrOutcomeUnknown = errors.New("withdrawal: payout outcome unknown")
	// ErrRejected marks a provider answer about our credentials or signature
	// (401, 403), not about the payout: it is retried (with a fresh secret)
	// and alarmed on, never a verdict.
	ErrRejected = errors.New("withdrawal: provider rejected our credentials")
	// ErrNoLookup marks a provider that offers no status lookup.
	ErrNoLookup = errors.New("withdrawal: provider has no status lookup")
	// ErrExists: a record with this id exists already.
	ErrExists = errors.New("withdrawal: exists")
	// ErrReservationLost: the idempotency reservation expired and was taken over.
	ErrReservationLost = errors.New("withdrawal: idempotency reservation lost")
	// ErrStale: the attempt was taken over by another consumer, or the
	// withdrawal was settled meanwhile: the attempt's own bookkeeping is
	// not recorded. A definite answer it got (paid) still is, as the
	// provider's word (see Processor).
	ErrStale = errors.New("withdrawal: attempt superseded")
	// ErrTooLate marks a provider call that was not made because it could
	// not end by its attempt's deadline (see WithCallDeadline): nothing
	// left, and it is no verdict on the payout.
	ErrTooLate = errors.New("withdrawal: provider call not made: past the attempt's deadline")
)
