package withdrawal

import (
	"context"
	"errors"
	"time"
)

// Store is the port a ledger backend implements: reads, idempotency, the
// create (a specialised step: it reserves, writes and schedules at once, on
// the hot path), and one Commit that every other change goes through. The
// rules of those changes are not the backend's: Decide makes them, and
// Records runs them over any Store, so that they are written once.
type Store interface {
	// Reserve claims an idempotency key for a create, or reports its state.
	Reserve(ctx context.Context, r Reservation) (KeyState, error)
	// Release gives up a reservation for id, so the client may retry at
	// once. sent says a Create for it was sent (and failed): a backend whose
	// create is not one atomic step then keeps the reservation's withdrawal
	// id for the retry, since a write of that create may still land; a
	// reservation no Create was sent for is dropped (the key is free for
	// another body). It is best effort: reservations also expire.
	Release(ctx context.Context, key IdemKey, id string, sent bool) error
	// Create stores w as scheduled, schedules it at w.DueAt and completes the
	// key's reservation with response, which is EncodeCreated(w): a ledger
	// may keep it, or rebuild it from the record when the key is replayed
	// (as EncodeCreated(w.AsCreated(w.DueAt))). It returns ErrExists if w.ID is taken and
	// ErrReservationLost if the reservation is no longer held for w.ID.
	Create(ctx context.Context, w Withdrawal, key IdemKey, response []byte) error
	// Get returns the user's withdrawal id, or ErrNotFound.
	Get(ctx context.Context, userID, id string) (Withdrawal, error)
	// List returns up to limit of the user's withdrawals, newest first,
	// starting after the id after (empty for the first page).
	List(ctx context.Context, userID string, limit int, after string) ([]Withdrawal, error)
	// Find returns withdrawal id whoever owns it (operators, provider
	// callbacks), or ErrNotFound.
	Find(ctx context.Context, id string) (Withdrawal, error)
	// Load returns the withdrawal ref locates (the payout step's read), or
	// ErrNotFound.
	Load(ctx context.Context, ref Ref) (Withdrawal, error)
	// Outstanding runs fn over every withdrawal not done with, a page at a
	// time: bounded by what is outstanding, not by history.
	Outstanding(ctx context.Context, fn func(Withdrawal) error) error
	// Commit writes c.Next (nil: nothing) with c.Queue if the record is
	// still at revision c.Rev, and returns the record after it. Otherwise
	// it writes nothing and returns ErrConflict with the record as it
	// stands (ErrNotFound when there is none). A commit sent again after
	// its answer was lost is recognised by c.Op and answers as the first.
	Commit(ctx context.Context, c Commit) (Withdrawal, error)
}

// Commit is one change of a record: the compare-and-set of the design.
type Commit struct {
	Ref Ref
	// Rev is the revision the change was decided on.
	Rev int64
	// Op names this write (Withdrawal.Op of Next).
	Op string
	// At is when the event happened (a backend that decides where a
	// schedule is kept by how far ahead it lies reads it).
	At time.Time
	// Next is the record to write, nil for queue operations alone (still
	// under the compare).
	Next *Withdrawal
	// Queue is written with Next: in the same atomic step where the
	// backend can (Redis), else after it, healed by the reconciler.
	Queue []QueueOp
}

// ErrConflict: the record changed since it was read; nothing was written.
var ErrConflict = errors.New("withdrawal: the record changed since it was read")

// Ledger is the system of record for withdrawals and their idempotency
// keys, as the services use it: a Store with the transitions. Every state
// change is conditional: Decide applies it only from the states the state
// machine allows, and the Store's Commit only to the record it was decided
// on, so concurrent or duplicate callers cannot move a record twice.
// Records implements the transitions over any Store.
type Ledger interface {
	Store
	// Advance decides event e on the record w as read and commits it on
	// w's revision; if the record moved since, it decides e again on the
	// record as it stands. It returns the decision (Next is the record
	// after it) and the decision's refusal as its error. The methods below
	// are the same, each reading the record first.
	Advance(ctx context.Context, w Withdrawal, e Event) (Decision, error)
	// Cancel moves a scheduled or retrying withdrawal to cancelled and takes it
	// off the queue. A cancelled one is returned as is; any other state gives
	// ErrNotCancellable with the record.
	Cancel(ctx context.Context, userID, id string, now time.Time) (Withdrawal, error)
	// Reschedule moves the due time of r.UserID's withdrawal r.ID to r.DueAt
	// while it is Reschedulable, atomically against the payout step's claim:
	// the new time holds and the old one never pays, or nothing changes. It
	// returns ErrNotFound (someone else's or no such id),
	// ErrPreconditionFailed (not at r.IfRevision) or ErrNotReschedulable,
	// the last two with the record as it stands.
	Reschedule(ctx context.Context, r Reschedule) (Withdrawal, error)
	// Begin starts a payout attempt named b.Attempt (see Start) and returns
	// the record. An attempt on a record with no call that may have paid is
	// counted at once (it sends); one on a record that may have been paid
	// settles first (a lookup) and counts itself with Send if it sends.
	Begin(ctx context.Context, ref Ref, b Begin) (Withdrawal, Start, error)
	// Send records that attempt is about to send the payout request: it
	// counts the call, stamps the first send, and, with neverReceived (the
	// provider's lookup said it never got the request), forgets that an
	// earlier call may have paid. It returns ErrStale if the attempt was
	// taken over.
	Send(ctx context.Context, ref Ref, attempt string, now time.Time, neverReceived bool) (Withdrawal, error)
	// Finish records the final result of attempt: paid or failed. It
	// returns ErrStale if that attempt was taken over.
	Finish(ctx context.Context, ref Ref, attempt string, r Result) (Withdrawal, error)
	// Retry records that attempt ended without a verdict and schedules the
	// next one at r.At. It returns ErrStale if that attempt was taken over.
	Retry(ctx context.Context, ref Ref, attempt string, r RetryAt) (Withdrawal, error)
	// Resolve settles withdrawal id by an operator's word (paid with a
	// payout id, or failed with a reason) when Unresolvable allows it, in
	// the same atomic step that writes it; one already ended as r says is
	// returned as it is. Otherwise it returns ErrNotResolvable, naming the
	// reason, with the record unchanged; ErrNotFound when there is none.
	Resolve(ctx context.Context, id string, r Resolution) (Withdrawal, error)
	// Apply applies a provider's callback to withdrawal id, once per event
	// id, never moving the withdrawal backwards. A callback about a
	// withdrawal that was never sent (Withdrawal.NeverSent, decided in the
	// same atomic step as the write) returns ErrNotSent with the record,
	// and writes nothing, not even the event id.
	Apply(ctx context.Context, id string, c Callback) (Withdrawal, Applied, error)
	// MarkNotified records that finance was told that the withdrawal is
	// status (a withdrawal returned meanwhile is told again).
	MarkNotified(ctx context.Context, ref Ref, status Status) error
}

// Reschedule asks to move a withdrawal's due time.
type Reschedule struct {
	UserID, ID string
	DueAt, Now time.Time
	// IfRevision, if set, requires the record to be at that revision
	// (If-Match); nil moves it whatever its revision.
	IfRevision *int64
	// By is who asks ("user" for the owner, else the operator); Reason is
	// an operator's reason. Both are kept in the record.
	By, Reason string
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
	// Response is the completed key's EncodeCreated: the withdrawal its
	// create answered with.
	Response []byte
}

// Begin asks to start a payout attempt.
type Begin struct {
	// Attempt names the attempt: unique, it is what the attempt's later
	// writes are fenced by, and how a write whose answer was lost and
	// resent is recognised as its own.
	Attempt string
	Now     time.Time
	// Until is the attempt's deadline: past it, another consumer may take
	// the withdrawal over (the first one died).
	Until time.Time
	// Claimed is the due time the delivery was claimed for (the job's
	// score when the poller took it; zero when unknown). A record due at
	// exactly that time starts (the poller's clock said it was due, within
	// the ledger's clock skew); one due at another time (rescheduled after
	// the claim) starts only once its own due time has passed by Now, so a
	// delivery of an old time never pays before the new one.
	Claimed time.Time
}

// Start is the outcome of Begin.
type Start int

// Begin outcomes.
const (
	// StartAttempt: the record is now processing under the new attempt.
	// If the record's MaybePaid is clear, the attempt was counted and sends;
	// otherwise it settles the earlier call first (see Ledger.Send).
	StartAttempt Start = iota + 1
	// StartBusy: another consumer's attempt is running and not yet overdue.
	// The ledger has scheduled the job again for the attempt's deadline (no
	// earlier than any schedule it has), so this delivery is done with: if
	// that consumer dies, the job comes back.
	StartBusy
	// StartNotDue: the record is scheduled for later (a stale or early job);
	// the ledger has put the job back at the record's due time.
	StartNotDue
	// StartFinal: the record is paid, failed, cancelled or returned.
	StartFinal
)

// Result is the final outcome of a payout attempt.
type Result struct {
	Status    Status // Paid or Failed
	PayoutID  string
	LastError string
	At        time.Time
}

// RetryAt is an attempt that ended without a verdict.
type RetryAt struct {
	// At is when to try again; Now is when the attempt ended.
	At, Now   time.Time
	LastError string
	// MaybePaid: the call may have paid (kept for good until settled).
	MaybePaid bool
}

// Resolution is an operator's settlement of a withdrawal.
type Resolution struct {
	Status   Status // Paid or Failed
	PayoutID string
	Reason   string
	By       string
	At       time.Time
	// MaxAttempts is HOURGLASS_MAX_ATTEMPTS: a withdrawal that no call may
	// have paid but that retries past it (the provider keeps refusing our
	// credentials) may be resolved as failed; 0 never allows that.
	MaxAttempts int
	// IfRevision, if set, is the revision of the record the operator
	// judged: the resolution is refused (ErrPreconditionFailed, nothing
	// written) if the record moved since, say the payout step sent the
	// request again and it may have paid. Service.Resolve requires it;
	// the ledger resolves the record as it stands when it is nil.
	IfRevision *int64
}

// Callback is a provider's report of a payout's outcome.
type Callback struct {
	EventID  string
	Status   Status // Paid, Failed or Returned
	PayoutID string
	Reason   string
	At       time.Time
}

// Applied is what applying a callback did.
type Applied int

// Callback outcomes.
const (
	// Changed: the callback moved the withdrawal on.
	Changed Applied = iota + 1
	// Duplicate: the event was applied before.
	Duplicate
	// Unchanged: the withdrawal is already there or further on (an
	// out-of-order or repeated report); nothing moved backwards.
	Unchanged
	// Conflict: the report contradicts the withdrawal's end (failed at the
	// provider after it was paid, paid after it was cancelled): nothing
	// moved, and operators must look.
	Conflict
	// NotSent: the withdrawal was never sent to the provider (ErrNotSent):
	// nothing moved, and operators must look. Ledgers never return it
	// with a nil error; it names the outcome in metrics and logs.
	NotSent
)

// String names the outcome for answers and logs.
func (a Applied) String() string {
	switch a {
	case Changed:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Unchanged:
		return "unchanged"
	case Conflict:
		return "conflict"
	case NotSent:
		return "not_sent"
	}
	return "unknown"
}

// Step is the transition a callback of status makes from a withdrawal in
// from: the status to move to and what that is. Both ledgers apply it.
func Step(from, callback Status) (Status, Applied) {
	switch {
	case from == callback:
		return from, Unchanged
	case callback == Returned:
		switch from {
		case Failed, Cancelled:
			return from, Conflict
		}
		return Returned, Changed // paid, or on its way (paid, then returned)
	case from == Returned:
		if callback == Failed {
			return from, Conflict
		}
		return from, Unchanged // the paid that came before the return
	case callback == Paid && (from == Failed || from == Cancelled):
		return from, Conflict
	case callback == Failed && from == Paid:
		return from, Conflict
	case callback == Failed && from == Cancelled:
		return from, Unchanged
	}
	return callback, Changed // a withdrawal on its way settles
}
