package withdrawal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

// Rules are the configurable limits of a withdrawal request.
type Rules struct {
	// Currencies accepted, each known to MinorDigits.
	Currencies []string
	// MaxAmount is the largest amount accepted, in any currency.
	MaxAmount decimal.Decimal
	// DefaultDelay applies when a request names neither delay nor time.
	DefaultDelay time.Duration
	// MaxDelay is the longest delay accepted.
	MaxDelay time.Duration
}

// Money is the rules of the request's amount.
func (r Rules) Money() money.Rules { return money.Rules{Currencies: r.Currencies, Max: r.MaxAmount} }

// Check reports a rule set that could not work.
func (r Rules) Check() error {
	if err := r.Money().Check(); err != nil {
		return fmt.Errorf("withdrawal: %w", err)
	}
	if r.MaxDelay <= 0 || r.DefaultDelay < 0 || r.DefaultDelay > r.MaxDelay {
		return fmt.Errorf("withdrawal: default delay %s must lie within 0..%s", r.DefaultDelay, r.MaxDelay)
	}
	return nil
}

// Request is a withdrawal request as typed by its caller (the HTTP API
// parses it, shared/httpapi): its due time named, not yet judged by the
// clock (Rules.Due), so that a replay is answered whatever the clock now
// says of it.
type Request struct {
	Amount      decimal.Decimal
	Currency    string
	Destination string
	When        When
}

// When names a due time as a request does: a delay from the moment it is
// judged, a time, or neither (the default delay).
type When struct {
	// Delay, if set, is the time from now: whole seconds.
	Delay *time.Duration
	// At, if not zero, is the time itself.
	At time.Time
}

// After is a When of a delay.
func After(d time.Duration) When { return When{Delay: &d} }

// spelling is how the request named its time, for the fingerprint.
func (w When) spelling() string {
	switch {
	case w.Delay != nil:
		return fmt.Sprintf("delay=%d", *w.Delay/time.Second)
	case !w.At.IsZero():
		return "at=" + clock.Format(w.At)
	}
	return "default"
}

// Fingerprint identifies the request's content for idempotency: the same
// fields (whatever their JSON spelling) give the same fingerprint.
func (req Request) Fingerprint() string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "amount=%s\x00currency=%s\x00destination=%s\x00%s",
		req.Amount.String(), req.Currency, req.Destination, req.When.spelling())
	return hex.EncodeToString(h.Sum(nil))
}

var destinationRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidDestination reports whether d can name a payout destination.
func ValidDestination(d string) bool { return destinationRe.MatchString(d) }

// DestinationRule is what a destination must be.
const DestinationRule = "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"

// Validate names every rule req breaks (a *validation.Error), the clock's
// judgement of its time aside (Due): the amount and currency, the
// destination, and a time named once, its delay within MaxDelay.
func (r Rules) Validate(req Request) error {
	verr := &validation.Error{}
	r.Money().CheckAmount(verr, req.Amount, req.Currency, "amount", "currency")
	if !ValidDestination(req.Destination) {
		verr.Add("destination", DestinationRule)
	}
	r.CheckWhen(req.When, verr)
	return verr.Err()
}

// CheckWhen adds to verr what is wrong with w whatever the clock says: both
// a delay and a time, or a delay that is not whole seconds within MaxDelay.
func (r Rules) CheckWhen(w When, verr *validation.Error) {
	switch {
	case w.Delay != nil && !w.At.IsZero():
		verr.Add("process_at", "give delay_seconds or process_at, not both")
	case w.Delay != nil && (*w.Delay < 0 || *w.Delay > r.MaxDelay || *w.Delay%time.Second != 0):
		verr.Add("delay_seconds", "must be a whole number within 0..%d", int64(r.MaxDelay/time.Second))
	}
}

// Due is the due time w names at now: the clock's judgement of a request.
// A time in the past, or more than MaxDelay ahead, is a *validation.Error
// on process_at.
func (r Rules) Due(w When, now time.Time) (time.Time, error) {
	now = now.Truncate(time.Millisecond)
	switch {
	case w.Delay != nil:
		return now.Add(*w.Delay), nil
	case w.At.IsZero():
		return now.Add(r.DefaultDelay), nil
	}
	at := w.At.UTC().Truncate(time.Millisecond)
	verr := &validation.Error{}
	r.checkAt(at, now, "process_at", verr)
	return at, verr.Err()
}

// checkAt records under field what makes at an unacceptable due time at
// now: in the past, or more than MaxDelay ahead.
func (r Rules) checkAt(at, now time.Time, field string, verr *validation.Error) {
	switch {
	case at.Before(now):
		verr.Add(field, "must not be in the past")
	case at.Sub(now) > r.MaxDelay:
		verr.Add(field, "must be at most %s ahead", r.MaxDelay)
	}
}

// CheckDue validates a due time named outside a request body (an
// operator's): the rules of process_at, at now.
func (r Rules) CheckDue(at, now time.Time, field string) error {
	verr := &validation.Error{}
	r.checkAt(at.UTC().Truncate(time.Millisecond), now.Truncate(time.Millisecond), field, verr)
	return verr.Err()
}
