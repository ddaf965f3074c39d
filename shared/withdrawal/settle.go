package withdrawal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/validation"
)

// Limits of a provider callback.
const (
	maxEventID = 255
	maxReason  = 500
	maxPayout  = 255
)

// Settled is the answer to a callback: where the withdrawal stands and what
// the callback did.
type Settled struct {
	Withdrawal Withdrawal
	Applied    Applied
}

// Callback applies a payout provider's callback (its signature already
// checked): paid or failed settles a withdrawal on its way, returned after
// paid means the money came back. Each event id is applied once; a
// callback out of order never moves a withdrawal backwards. One that
// contradicts how the withdrawal ended is kept out and reported to
// operators (a log line and the PayoutConflicts metric). One about a
// withdrawal that was never sent to the provider (scheduled, cancelled
// before any call) changes nothing and is refused with ErrNotSent, and
// reported the same way: the provider reports a payout nobody asked for.
func (s *Service) Callback(ctx context.Context, id string, c Callback) (Settled, error) {
	if err := CheckCallback(id, c); err != nil {
		return Settled{}, err
	}
	var w Withdrawal
	var applied Applied
	var err error
	c.At = s.cfg.Clock.Now().UTC()
	if plausibleID(id) {
		w, applied, err = s.cfg.Ledger.Apply(ctx, id, c)
	} else {
		err = ErrNotFound
	}
	switch {
	case errors.Is(err, ErrNotSent):
		applied = NotSent
	case errors.Is(err, ErrNotFound):
		// Signed by the provider, about no withdrawal of ours: a payout
		// nobody here asked for, or the wrong environment's callbacks.
		s.cfg.Metrics.Count(metrics.PayoutCallbacks, 1, map[string]string{"Result": metrics.CallbackUnknown})
		s.cfg.Logger.Error("payout callback about an unknown withdrawal; refused, for an operator to look at",
			"withdrawal_id", id, "event_id", c.EventID, "callback_status", c.Status)
		return Settled{}, err
	case err != nil:
		return Settled{}, err
	}
	log := correlation.Logger(s.cfg.Logger, w.RequestID).With("withdrawal_id", id, "event_id", c.EventID, "callback_status", c.Status, "status", w.Status)
	s.cfg.Metrics.Count(metrics.PayoutCallbacks, 1, map[string]string{"Result": applied.String()})
	switch applied {
	case NotSent:
		s.cfg.Metrics.Count(metrics.PayoutConflicts, 1, nil)
		log.Error("payout callback about a withdrawal never sent to the provider; refused, nothing changed, for an operator to look at",
			"attempts", w.Attempts)
		return Settled{Withdrawal: w, Applied: applied}, fmt.Errorf("withdrawal: callback %s for %s: %w", c.EventID, id, ErrNotSent)
	case Changed:
		log.Info("payout callback applied")
		if w.Untold() && s.cfg.OnScheduled != nil {
			s.cfg.OnScheduled(c.At) // its job is due now: finance is told
		}
	case Conflict:
		s.cfg.Metrics.Count(metrics.PayoutConflicts, 1, nil)
		log.Error("payout callback contradicts how the withdrawal ended; left as it is for an operator to look at")
	default:
		log.Info("payout callback changed nothing", "result", applied.String())
	}
	return Settled{Withdrawal: w, Applied: applied}, nil
}

// CheckCallback names what is wrong with a callback about withdrawal id (a
// *validation.Error): an event id, the withdrawal's id and a status of
// paid, failed or returned are required; the payout id and the reason are
// optional; all are printable and of bounded length.
func CheckCallback(id string, c Callback) error {
	var v validation.Error
	text := func(field, s string, max int, required bool) {
		if (required && s == "") || len(s) > max || !printable(s) {
			v.Add(field, "must be 1 to %d printable characters", max)
		}
	}
	text("event_id", c.EventID, maxEventID, true)
	text("payout_id", c.PayoutID, maxPayout, false)
	text("reason", c.Reason, maxReason, false)
	text("withdrawal_id", id, 64, true)
	switch c.Status {
	case Paid, Failed, Returned:
	default:
		v.Add("status", "must be paid, failed or returned")
	}
	return v.Err()
}

// printable reports whether s is valid UTF-8 without control or format
// characters: it goes to the ledger, to finance and into logs.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.In(r, unicode.Cc, unicode.Cf)
	})
}

// Resolve settles withdrawal id by an operator's word: paid (with the
// provider's payout id) or failed (with a reason), recorded with who and
// when, and told to finance like any outcome. It is for a withdrawal whose
// outcome the system cannot settle itself (a call that may have paid, past
// the provider's idempotency window, at a provider without a lookup), and
// anything else Unresolvable names is refused with ErrNotResolvable and the
// reason, nothing written. r.IfRevision is required: the verdict is taken
// only on the record the operator judged (ErrPreconditionFailed when it
// moved).
func (s *Service) Resolve(ctx context.Context, id string, r Resolution) (Withdrawal, error) {
	var v validation.Error
	switch r.Status {
	case Paid:
		if r.PayoutID == "" || len(r.PayoutID) > maxPayout || !printable(r.PayoutID) {
			v.Add("payout_id", "paid needs the provider's payout id: 1 to %d printable characters", maxPayout)
		}
	case Failed:
		if r.Reason == "" || len(r.Reason) > maxReason || !printable(r.Reason) {
			v.Add("reason", "failed needs a reason: 1 to %d printable characters", maxReason)
		}
	default:
		v.Add("status", "must be paid or failed")
	}
	if r.By == "" || len(r.By) > 128 || !printable(r.By) {
		v.Add("by", "must name the operator: 1 to 128 printable characters")
	}
	if r.IfRevision == nil {
		v.Add("revision", "must name the revision of the withdrawal as judged (payouts unresolved lists it): "+
			"a record that moved since, say sent again and paid, is not settled by a stale verdict")
	}
	if len(v.Errors) > 0 {
		return Withdrawal{}, &v
	}
	if !plausibleID(id) {
		return Withdrawal{}, ErrNotFound
	}
	r.At = s.cfg.Clock.Now().UTC()
	w, err := s.cfg.Ledger.Resolve(ctx, id, r)
	if errors.Is(err, ErrNotResolvable) {
		correlation.Logger(s.cfg.Logger, w.RequestID).Warn("operator resolution refused; nothing changed", "withdrawal_id", id,
			"status", w.Status, "by", r.By, "error", err.Error())
	}
	if err != nil {
		return w, err
	}
	correlation.Logger(s.cfg.Logger, w.RequestID).Warn("withdrawal resolved by an operator", "withdrawal_id", id, "status", w.Status, "by", r.By)
	if s.cfg.OnScheduled != nil {
		s.cfg.OnScheduled(r.At)
	}
	return w, nil
}

// Unresolvable says why an operator's resolution r may not settle w now
// (r.At): "" when it may. Only a withdrawal that nothing else can settle
// is an operator's (what Unresolved lists): one not final, with no attempt
// running, that a call may have paid (MaybePaid: paid or failed, as the
// provider's records say). One that no call may have paid but that retries
// past r.MaxAttempts (our credentials refused, again and again) may be
// resolved as failed only: no money left, so paid would be invented. A
// withdrawal never sent, or one the payout step settles itself, is
// refused. A record already in r.Status is no refusal: ledgers return it
// as it is. Decide applies it in the step that commits the resolution.
func Unresolvable(w Withdrawal, r Resolution) string {
	switch {
	case w.Status.Final():
		return fmt.Sprintf("it is %s already", w.Status)
	case w.Status == Processing && w.ProcessingUntil.After(r.At):
		return fmt.Sprintf("a payout attempt runs until %s; try again after it", w.ProcessingUntil.Format(time.RFC3339))
	case w.NeverSent():
		return fmt.Sprintf("it is %s and was never sent to the payout provider: no call may have paid it, "+
			"and the payout step pays it when it falls due", w.Status)
	case w.MaybePaid:
		return ""
	case w.Status == Processing:
		return "its last payout attempt ended without a word (its consumer may have died mid-call): " +
			"the next attempt asks the provider and settles it"
	case r.Status == Failed && r.MaxAttempts > 0 && w.Attempts >= r.MaxAttempts:
		return "" // retrying for good with no call that may have paid
	case r.Status == Paid:
		return fmt.Sprintf("no call may have paid it (%d calls, each answered without a payout), so it cannot be resolved as paid",
			w.Attempts)
	}
	if r.MaxAttempts > 0 {
		return fmt.Sprintf("no call may have paid it and it has had %d of %d attempts: the payout step settles it",
			w.Attempts, r.MaxAttempts)
	}
	return "no call may have paid it: the payout step settles it"
}

// Unresolved lists what needs an operator's eye: withdrawals on their way
// whose payout may have been made (an answer never came), or that keep
// retrying past the attempts a transient failure gets. It is bounded by
// what is outstanding, not by history. What it lists (once no attempt
// runs) is what Resolve takes; the second kind as failed only.
func (s *Service) Unresolved(ctx context.Context, maxAttempts int) ([]Withdrawal, error) {
	var out []Withdrawal
	err := s.cfg.Ledger.Outstanding(ctx, func(w Withdrawal) error {
		if !w.Status.Final() && (w.MaybePaid || w.Attempts >= maxAttempts) {
			out = append(out, w)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("withdrawal: list unresolved: %w", err)
	}
	return out, nil
}
