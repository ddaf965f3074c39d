package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Records is the transitions of Ledger over a Store: read the record,
// Decide, Commit on the revision read; when the record moved meanwhile the
// commit's conflict returns it as it stands, and the event is decided
// again on that. A backend embeds Records with itself as the Store.
type Records struct {
	Store Store
}

// maxConflicts bounds how often one transition is decided again on a
// record that keeps moving under it.
const maxConflicts = 10

// run decides e on w and commits it, again on what the record became while
// the commit finds it moved.
func (r Records) run(ctx context.Context, w Withdrawal, e Event) (Decision, error) {
	for range maxConflicts {
		d := Decide(w, e)
		if d.Err != nil {
			return d, d.Err
		}
		if !d.Write && len(d.Queue) == 0 {
			return d, nil
		}
		c := Commit{Ref: w.Ref(), Rev: w.Revision, Op: newID("op_", time.Now()), At: eventTime(e), Queue: d.Queue}
		if d.Write {
			next := d.Next
			next.Op = c.Op
			c.Next = &next
		}
		got, err := r.Store.Commit(ctx, c)
		switch {
		case errors.Is(err, ErrConflict):
			w = got
			continue
		case err != nil:
			return d, err
		}
		if d.Write {
			d.Next = got
		}
		return d, nil
	}
	return Decision{}, fmt.Errorf("withdrawal: %s %s: the record keeps changing", e.EventName(), w.ID)
}

// Advance implements Ledger: e decided on w as the caller read it, and
// committed on w's revision; when the record moved since, decided again on
// the record as it stands. A caller that holds the record (the payout step,
// after Begin) saves the read.
func (r Records) Advance(ctx context.Context, w Withdrawal, e Event) (Decision, error) {
	d, err := r.run(ctx, w, e)
	if err != nil {
		return d, fmt.Errorf("withdrawal: %s %s: %w", e.EventName(), w.ID, err)
	}
	return d, nil
}

// Cancel implements Ledger.
func (r Records) Cancel(ctx context.Context, userID, id string, now time.Time) (Withdrawal, error) {
	return r.owned(ctx, userID, id, Cancel{UserID: userID, Now: now})
}

// Reschedule implements Ledger.
func (r Records) Reschedule(ctx context.Context, rs Reschedule) (Withdrawal, error) {
	return r.owned(ctx, rs.UserID, rs.ID, rs)
}

// owned runs an event of userID's withdrawal id: someone else's is not
// found, and a refusal comes with the record as it stands.
func (r Records) owned(ctx context.Context, userID, id string, e Event) (Withdrawal, error) {
	w, err := r.Store.Get(ctx, userID, id)
	if err != nil {
		return Withdrawal{}, err
	}
	d, err := r.run(ctx, w, e)
	if errors.Is(err, ErrNotFound) {
		return Withdrawal{}, err
	}
	return d.Next, err
}

// Begin implements Ledger.
func (r Records) Begin(ctx context.Context, ref Ref, b Begin) (Withdrawal, Start, error) {
	w, err := r.Store.Load(ctx, ref)
	if err != nil {
		return Withdrawal{}, 0, fmt.Errorf("withdrawal: begin payout of %s: %w", ref.ID, err)
	}
	d, err := r.run(ctx, w, b)
	if err != nil {
		return Withdrawal{}, 0, fmt.Errorf("withdrawal: begin payout of %s: %w", ref.ID, err)
	}
	return d.Next, d.Start, nil
}

// attempt runs an event of a running attempt on ref's record.
func (r Records) attempt(ctx context.Context, ref Ref, e Event) (Withdrawal, error) {
	w, err := r.Store.Load(ctx, ref)
	if err != nil {
		return Withdrawal{}, fmt.Errorf("withdrawal: %s %s: %w", e.EventName(), ref.ID, err)
	}
	d, err := r.run(ctx, w, e)
	if err != nil {
		return d.Next, fmt.Errorf("withdrawal: %s %s: %w", e.EventName(), ref.ID, err)
	}
	return d.Next, nil
}

// Send implements Ledger.
func (r Records) Send(ctx context.Context, ref Ref, attempt string, now time.Time, neverReceived bool) (Withdrawal, error) {
	return r.attempt(ctx, ref, Send{Attempt: attempt, Now: now, NeverReceived: neverReceived})
}

// Finish implements Ledger.
func (r Records) Finish(ctx context.Context, ref Ref, attempt string, res Result) (Withdrawal, error) {
	return r.attempt(ctx, ref, Finish{Attempt: attempt, Result: res})
}

// Retry implements Ledger.
func (r Records) Retry(ctx context.Context, ref Ref, attempt string, at RetryAt) (Withdrawal, error) {
	return r.attempt(ctx, ref, Retry{Attempt: attempt, RetryAt: at})
}

// Resolve implements Ledger.
func (r Records) Resolve(ctx context.Context, id string, res Resolution) (Withdrawal, error) {
	w, err := r.Store.Find(ctx, id)
	if err != nil {
		return Withdrawal{}, err
	}
	d, err := r.run(ctx, w, res)
	return d.Next, err
}

// Apply implements Ledger.
func (r Records) Apply(ctx context.Context, id string, c Callback) (Withdrawal, Applied, error) {
	w, err := r.Store.Find(ctx, id)
	if err != nil {
		return Withdrawal{}, 0, err
	}
	d, err := r.run(ctx, w, c)
	if err != nil {
		return d.Next, 0, err
	}
	return d.Next, d.Applied, nil
}

// MarkNotified implements Ledger. A withdrawal gone or moved on meanwhile
// is no error: there is nothing to mark, or finance hears again.
func (r Records) MarkNotified(ctx context.Context, ref Ref, status Status) error {
	w, err := r.Store.Load(ctx, ref)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("withdrawal: mark %s notified: %w", ref.ID, err)
	}
	if _, err := r.run(ctx, w, Notified{Status: status}); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("withdrawal: mark %s notified: %w", ref.ID, err)
	}
	return nil
}

// eventTime is when e happened (zero for Notified, which needs none).
func eventTime(e Event) time.Time {
	switch e := e.(type) {
	case Begin:
		return e.Now
	case Send:
		return e.Now
	case Finish:
		return e.Result.At
	case Retry:
		return e.Now
	case Cancel:
		return e.Now
	case Reschedule:
		return e.Now
	case Callback:
		return e.At
	case Resolution:
		return e.At
	}
	return time.Time{}
}
