package withdrawal

import (
	"context"
	"time"
)

// Ledger is the system of record for withdrawals and their idempotency keys.
// Every state change is conditional: the backend applies it only from the
// states the state machine allows, so concurrent or duplicate callers cannot
// move a record twice. Scheduling in the delay queue is the ledger's job too,
// so that a backend that can (Redis) makes record and schedule one atomic step.
type Ledger interface {
	// Reserve claims an idempotency key for a create, or reports its state.
	Reserve(ctx context.Context, r Reservation) (KeyState, error)
	// Release drops a reservation that failed before Create, so the client may
	// retry at once. It is best effort: reservations also expire.
	Release(ctx context.Context, key IdemKey, id string) error
	// Create stores w as scheduled, schedules it at w.DueAt and completes the
	// key's reservation with response. It returns ErrExists if w.ID is taken and
	// ErrReservationLost if the reservation is no longer held for w.ID.
	Create(ctx context.Context, w Withdrawal, key IdemKey, response []byte) error
	// Get returns the user's withdrawal id, or ErrNotFound.
	Get(ctx context.Context, userID, id string) (Withdrawal, error)
	// List returns up to limit of the user's withdrawals, newest first,
	// starting after the id after (empty for the first page).
	List(ctx context.Context, userID string, limit int, after string) ([]Withdrawal, error)
	// Cancel moves a scheduled or retrying withdrawal to cancelled and takes it
	// off the queue. A cancelled one is returned as is; any other state gives
	// ErrNotCancellable with the record.
	Cancel(ctx context.Context, userID, id string, now time.Time) (Withdrawal, error)

	// Begin starts a payout attempt (see Start) and returns the record.
	Begin(ctx context.Context, ref Ref, now, until time.Time) (Withdrawal, Start, error)
	// Finish records the result of attempt number attempt: paid or failed.
	// It returns ErrStale if that attempt was taken over.
	Finish(ctx context.Context, ref Ref, attempt int, r Result) (Withdrawal, error)
	// Retry records a transient failure of attempt and schedules the next one
	// at at. It returns ErrStale if that attempt was taken over.
	Retry(ctx context.Context, ref Ref, attempt int, at, now time.Time, lastError string) (Withdrawal, error)
	// MarkNotified records that finance was told of the final outcome.
	MarkNotified(ctx context.Context, ref Ref) error
}

// IdemKey is an idempotency key, scoped to its user. Shard is the user's shard.
type IdemKey struct {
	UserID string
	Key    string
	Shard  int
}

// Reservation asks to reserve Key for a create of withdrawal ID.
type Reservation struct {
	Key         IdemKey
	Fingerprint string
	ID          string
	Now         time.Time
	// LockUntil is when an unfinished reservation may be taken over.
	LockUntil time.Time
	// ExpiresAt is when the key is forgotten (24 h after first use).
	ExpiresAt time.Time
}

// KeyPhase is where an idempotency key stands.
type KeyPhase int

// Key phases.
const (
	// KeyAcquired: the caller holds the key and must create withdrawal ID.
	KeyAcquired KeyPhase = iota + 1
	// KeyInFlight: another request holds the key right now.
	KeyInFlight
	// KeyCompleted: a request with the key finished; Response is its body.
	KeyCompleted
)

// KeyState is the answer to a Reservation.
type KeyState struct {
	Phase       KeyPhase
	Fingerprint string
	ID          string
	Response    []byte
}

// Start is the outcome of Begin.
type Start int

// Begin outcomes.
const (
	// StartAttempt: the record is now processing under a new attempt; call the
	// provider.
	StartAttempt Start = iota + 1
	// StartBusy: another consumer's attempt is running and not yet overdue.
	// The ledger has scheduled the job again for the attempt's deadline, so
	// this delivery is done with: if that consumer dies, the job comes back.
	StartBusy
	// StartNotDue: the record is scheduled for later (a stale duplicate job).
	StartNotDue
	// StartFinal: the record is paid, failed or cancelled.
	StartFinal
)

// Result is the final outcome of a payout attempt.
type Result struct {
	Status    Status // Paid or Failed
	PayoutID  string
	LastError string
	At        time.Time
}
