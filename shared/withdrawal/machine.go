package withdrawal

import (
	"fmt"
	"slices"
	"time"
)

// The withdrawal state machine: every change to a record after its create
// is Decide(record, event). It is a pure function of what it is given (the
// event carries the time), so the same rules hold on every ledger, and a
// table test (machine_test.go) covers every pair of state and event with no
// backend at all. A ledger only loads records and commits what Decide
// returns, as a compare-and-set on the revision it read (see Store.Commit,
// Records): what a concurrent writer changed in between is seen by the
// compare, and the event is decided again on the record as it then stands.

// Event is what happens to a withdrawal: Begin, Send, Finish, Retry,
// Cancel, Reschedule, Callback, Resolution or Notified.
type Event interface {
	// EventName names the event in the transition table and in logs.
	EventName() string
}

// Send is an attempt that settled first (the record may have been paid)
// about to send the payout request: it counts the call, and NeverReceived
// (the provider's lookup proved the request never reached it) forgets that
// an earlier call may have paid.
type Send struct {
	Attempt       string
	Now           time.Time
	NeverReceived bool
}

// Finish is the final result of an attempt: paid or failed.
type Finish struct {
	Attempt string
	Result  Result
}

// Retry is an attempt that ended without a verdict; the next one is at At.
type Retry struct {
	Attempt string
	RetryAt
}

// Cancel is the owner's cancellation.
type Cancel struct {
	UserID string
	Now    time.Time
}

// Notified says finance was told that the withdrawal is Status.
type Notified struct {
	Status Status
}

// EventName implements Event.
func (Begin) EventName() string { return "begin" }

// EventName implements Event.
func (Send) EventName() string { return "send" }

// EventName implements Event.
func (e Finish) EventName() string { return "finish " + string(e.Result.Status) }

// EventName implements Event.
func (Retry) EventName() string { return "retry" }

// EventName implements Event.
func (Cancel) EventName() string { return "cancel" }

// EventName implements Event.
func (Reschedule) EventName() string { return "reschedule" }

// EventName implements Event.
func (c Callback) EventName() string { return "callback " + string(c.Status) }

// EventName implements Event.
func (r Resolution) EventName() string { return "resolve " + string(r.Status) }

// EventName implements Event.
func (Notified) EventName() string { return "notified" }

// QueueKind is what a queue operation does to a withdrawal's job.
type QueueKind string

// Queue operations. The delay queue's due set holds the job; its inflight
// set holds a claimed job's lease; the open set (Redis) holds what is not
// done with, scored by when to look at it again (the reconciler's list).
const (
	// Schedule puts the job in the due set at At (replacing its time).
	Schedule QueueKind = "schedule"
	// ScheduleNoEarlier puts the job at At unless it is due later already.
	ScheduleNoEarlier QueueKind = "schedule_no_earlier"
	// DropLease takes a claimed job's lease away (a claim of the old time
	// not yet handed over is dropped; Begin fences one already on its way).
	DropLease QueueKind = "drop_lease"
	// Unschedule takes the job off the queue, lease and all.
	Unschedule QueueKind = "unschedule"
	// Watch keeps the withdrawal in the open set, to look at again at At.
	Watch QueueKind = "watch"
	// Unwatch takes it out of the open set: nothing is left to do.
	Unwatch QueueKind = "unwatch"
)

// QueueOp is one queue operation a transition commits with its record.
type QueueOp struct {
	Kind QueueKind
	At   time.Time // Schedule, ScheduleNoEarlier, Watch
}

// String renders the operation as the transition table shows it.
func (o QueueOp) String() string {
	if o.At.IsZero() {
		return string(o.Kind)
	}
	return string(o.Kind) + "@" + o.At.UTC().Format(time.RFC3339)
}

// Call is the outbound call an attempt makes next.
type Call string

// Calls.
const (
	CallNone   Call = ""
	CallPay    Call = "pay"    // the payout request, under the withdrawal's key
	CallLookup Call = "lookup" // the provider's status lookup, to settle a call that may have paid
)

// Decision is what an event does to a record: the record after it, whether
// that is to be written, the queue operations written with it, the
// outbound effects it calls for, and the answer the ledger gives.
type Decision struct {
	// Next is the record after the event (the record as it was when
	// nothing changes). A written one has Revision one past the one read.
	Next Withdrawal
	// Write says Next differs from the record and must be committed.
	Write bool
	// Queue is committed with Next, or alone when Write is false.
	Queue []QueueOp
	// Call is the outbound call the event calls for (Begin, Send).
	Call Call
	// Tell says finance is to hear of Next's outcome (Next.Processed()).
	Tell bool
	// Start is Begin's outcome; Applied a callback's.
	Start   Start
	Applied Applied
	// Err is the refusal the ledger answers (ErrStale, ErrNotFound,
	// ErrNotCancellable, ErrNotReschedulable, ErrPreconditionFailed,
	// ErrNotResolvable, ErrNotSent, or a bad event), with Next as it stands.
	Err error
}

// ClockSkew is how far a consumer's clock may run behind the poller's that
// claimed a job before the job counts as not due yet.
const ClockSkew = time.Second

// KeptEvents bounds the callback event ids a record keeps to tell a replay.
const KeptEvents = 16

// Decide is the state machine: what event e does to record w. It reads no
// clock and no store; every time it needs is in the event.
func Decide(w Withdrawal, e Event) Decision {
	d := Decision{Next: w}
	switch e := e.(type) {
	case Begin:
		decideBegin(&d, w, e)
	case Send:
		if !w.runs(e.Attempt) {
			return d.refuse(ErrStale)
		}
		n := d.change(e.Now)
		n.Attempts++
		n.sent(e.Now, w.ProcessingUntil)
		if e.NeverReceived {
			n.MaybePaid = false
		}
		d.Call = CallPay
	case Finish:
		if e.Result.Status != Paid && e.Result.Status != Failed {
			return d.refuse(fmt.Errorf("withdrawal: finish as %q: not a final payout status", e.Result.Status))
		}
		if !w.runs(e.Attempt) {
			return d.refuse(ErrStale)
		}
		n := d.change(e.Result.At)
		n.settle(e.Result.Status, e.Result.At)
		n.PayoutID, n.LastError = e.Result.PayoutID, e.Result.LastError
		d.Queue = []QueueOp{{Kind: Watch, At: e.Result.At}}
		d.Tell = true
	case Retry:
		if !w.runs(e.Attempt) {
			return d.refuse(ErrStale)
		}
		n := d.change(e.Now)
		n.Status, n.DueAt, n.LastError, n.ProcessingUntil = Retrying, e.At, e.LastError, time.Time{}
		n.MaybePaid = w.MaybePaid || e.MaybePaid
		d.Queue = moveTo(e.At)
	case Cancel:
		switch {
		case w.UserID != e.UserID:
			return d.refuse(ErrNotFound)
		case w.Status == Cancelled:
			return d
		case !w.Cancellable():
			return d.refuse(ErrNotCancellable)
		}
		d.change(e.Now).Status = Cancelled
		d.Queue = []QueueOp{{Kind: Unschedule}, {Kind: Unwatch}}
	case Reschedule:
		switch {
		case w.UserID != e.UserID:
			return d.refuse(ErrNotFound)
		case e.IfRevision != nil && *e.IfRevision != w.Revision:
			return d.refuse(fmt.Errorf("withdrawal: %s is at revision %d: %w", w.ID, w.Revision, ErrPreconditionFailed))
		case !w.Reschedulable():
			return d.refuse(fmt.Errorf("withdrawal: %s is %s: %w", w.ID, w.Shown(), ErrNotReschedulable))
		}
		n := d.change(e.Now)
		n.RescheduledFrom, n.DueAt = w.DueAt, e.DueAt
		n.RescheduledBy, n.RescheduleReason, n.RescheduledAt = e.By, e.Reason, e.Now
		d.Queue = moveTo(e.DueAt)
	case Callback:
		decideCallback(&d, w, e)
	case Resolution:
		decideResolution(&d, w, e)
	case Notified:
		if w.Status != e.Status {
			return d // it moved on (paid, then returned): finance hears again
		}
		if w.Told != e.Status {
			d.Write = true
			d.Next.Told = e.Status
			d.Next.Revision++
		}
		d.Queue = []QueueOp{{Kind: Unwatch}}
	default:
		return d.refuse(fmt.Errorf("withdrawal: unknown event %T", e))
	}
	return d
}

func decideBegin(d *Decision, w Withdrawal, b Begin) {
	takeover := false
	switch {
	case w.Status == Processing && w.Attempt == b.Attempt:
		d.Start, d.Call = StartAttempt, w.nextCall() // our own begin, answered again
		return
	case w.Status.Final():
		d.Start, d.Tell = StartFinal, w.Untold()
		return
	case w.Status == Processing && w.ProcessingUntil.After(b.Now):
		// Follow the running attempt up at its deadline, so that a
		// consumer that died mid-attempt is taken over; never earlier
		// than a schedule the job has (a retry recorded meanwhile).
		d.Start = StartBusy
		d.Queue = []QueueOp{{Kind: ScheduleNoEarlier, At: w.ProcessingUntil}}
		return
	case w.Status == Processing:
		// Its consumer died past the deadline, perhaps after its request
		// left: the payout may have been made.
		takeover = true
	default: // scheduled, retrying
		latest := b.Now.Add(ClockSkew)
		if !b.Claimed.IsZero() && !b.Claimed.Equal(w.DueAt) {
			latest = b.Now // rescheduled after the claim: its own time only
		}
		if w.DueAt.After(latest) {
			d.Start = StartNotDue
			d.Queue = []QueueOp{{Kind: Schedule, At: w.DueAt}}
			return
		}
	}
	n := d.change(b.Now)
	n.Status, n.ProcessingUntil, n.Attempt = Processing, b.Until, b.Attempt
	switch {
	case takeover:
		n.MaybePaid = true
	case !w.MaybePaid:
		n.Attempts++ // the call it is about to make
		n.sent(b.Now, b.Until)
	}
	d.Start, d.Call = StartAttempt, n.nextCall()
	d.Queue = []QueueOp{{Kind: Watch, At: b.Until}}
}

func decideCallback(d *Decision, w Withdrawal, c Callback) {
	switch {
	case slices.Contains(w.Events, c.EventID):
		d.Applied = Duplicate
		return
	case w.NeverSent():
		// Nothing is written, not even the event id: the same event after a
		// real send still applies.
		d.refuse(fmt.Errorf("withdrawal: callback %s: %s is %s with %d calls: %w", c.EventID, w.ID, w.Status, w.Attempts,
			ErrNotSent))
		return
	}
	to, applied := Step(w.Status, c.Status)
	d.Applied = applied
	d.Write = true
	d.Next.Revision++
	d.Next.Events = keep(w.Events, c.EventID)
	if applied != Changed {
		return
	}
	n := &d.Next
	n.UpdatedAt = c.At
	n.settle(to, c.At)
	if c.PayoutID != "" {
		n.PayoutID = c.PayoutID
	}
	if to == Failed {
		n.LastError = c.Reason
	}
	d.Queue = []QueueOp{{Kind: Schedule, At: c.At}, {Kind: Watch, At: c.At}} // its job tells finance now
	d.Tell = n.Untold()
}

func decideResolution(d *Decision, w Withdrawal, r Resolution) {
	switch {
	case r.Status != Paid && r.Status != Failed:
		d.refuse(fmt.Errorf("withdrawal: resolve %s as %q: not a final payout status", w.ID, r.Status))
		return
	case w.Status == r.Status:
		return // resolved so already
	}
	// What may not be resolved at all says why, whatever was judged; what
	// may is resolved only on the revision judged.
	if why := Unresolvable(w, r); why != "" {
		d.refuse(fmt.Errorf("withdrawal: %s is not an operator's to resolve as %s: %s: %w", w.ID, r.Status, why, ErrNotResolvable))
		return
	}
	if r.IfRevision != nil && *r.IfRevision != w.Revision {
		d.refuse(fmt.Errorf("withdrawal: %s is at revision %d, not %d as judged: %w", w.ID, w.Revision, *r.IfRevision,
			ErrPreconditionFailed))
		return
	}
	n := d.change(r.At)
	n.settle(r.Status, r.At)
	n.ResolvedBy, n.ResolvedAt = r.By, r.At
	if r.Status == Paid {
		n.PayoutID = r.PayoutID
	} else {
		n.LastError = r.Reason
	}
	d.Queue = []QueueOp{{Kind: Schedule, At: r.At}, {Kind: Watch, At: r.At}}
	d.Tell = true
}

// change marks d as a write at now and returns its next record to change.
func (d *Decision) change(now time.Time) *Withdrawal {
	d.Write = true
	d.Next.UpdatedAt = now
	d.Next.Revision++
	return &d.Next
}

// refuse makes d a refusal with err, nothing written.
func (d *Decision) refuse(err error) Decision {
	d.Err, d.Write, d.Queue, d.Call, d.Tell = err, false, nil, CallNone, false
	return *d
}

// runs reports whether attempt is the one under way on w.
func (w Withdrawal) runs(attempt string) bool { return w.Status == Processing && w.Attempt == attempt }

// nextCall is the call an attempt on w makes first: the lookup when an
// earlier call may have paid, else the payout request.
func (w Withdrawal) nextCall() Call {
	if w.MaybePaid {
		return CallLookup
	}
	return CallPay
}

// sent stamps a payout request counted at now by an attempt whose calls
// end by until: the first send, and until as the last send's deadline
// (never lowered).
func (w *Withdrawal) sent(now, until time.Time) {
	if w.FirstSentAt.IsZero() {
		w.FirstSentAt = now
	}
	if until.After(w.SentUntil) {
		w.SentUntil = until
	}
}

// settle ends w as status at at: no attempt runs, nothing is unknown.
func (w *Withdrawal) settle(status Status, at time.Time) {
	w.Status, w.ProcessedAt, w.ProcessingUntil, w.MaybePaid = status, at, time.Time{}, false
}

// moveTo is the queue operations of a new due time at.
func moveTo(at time.Time) []QueueOp {
	return []QueueOp{{Kind: Schedule, At: at}, {Kind: DropLease}, {Kind: Watch, At: at}}
}

// keep appends id to the kept event ids, the oldest dropped past KeptEvents.
func keep(events []string, id string) []string {
	out := append(slices.Clone(events), id)
	if len(out) > KeptEvents {
		out = out[len(out)-KeptEvents:]
	}
	return out
}
