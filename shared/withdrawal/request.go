package withdrawal

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// Request is a valid withdrawal request.
type Request struct {
	Amount      decimal.Decimal
	Currency    string
	Destination string
	DueAt       time.Time
	// Fingerprint identifies the request's content for idempotency: the same
	// fields (whatever their JSON spelling) give the same fingerprint.
	Fingerprint string
}

var destinationRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

var knownFields = map[string]bool{
	"amount": true, "currency": true, "destination": true, "delay_seconds": true, "process_at": true,
}

// Parse decodes and validates a request body at now. It returns a
// *validation.Error naming every broken rule.
func (r Rules) Parse(body []byte, now time.Time) (Request, error) {
	req, late, err := r.parse(body, now)
	if err := joinInvalid(err, late); err != nil {
		return Request{}, err
	}
	return req, nil
}

// parse is Parse with the clock's judgement kept apart: late names what only
// the clock refuses (a process_at in the past, or too far ahead), err every
// other broken rule. With err nil, req and its fingerprint are complete even
// when late is not: a replay of a stored create is answered whatever the
// clock now says of its body (Service.Create).
func (r Rules) parse(body []byte, now time.Time) (req Request, late, err error) {
	verr, lateErr := &validation.Error{}, &validation.Error{}
	raw := verr.Object(body, knownFields, false)
	if raw == nil {
		return Request{}, nil, verr
	}
	req.Amount, req.Currency, _, _ = r.Money().Parse(verr, raw, "amount", "currency", true)
	var destinationOK bool
	req.Destination, destinationOK = verr.String(raw, "destination")
	if destinationOK && !destinationRe.MatchString(req.Destination) {
		verr.Add("destination", "must be 1 to 64 of A-Z, a-z, 0-9, _ and -")
	}

	due, spelling := r.parseDue(raw, now, verr, lateErr)
	if err := verr.Err(); err != nil {
		return Request{}, lateErr.Err(), err
	}
	req.DueAt = due
	req.Fingerprint = fingerprint(req, spelling)
	return req, lateErr.Err(), nil
}

var rescheduleFields = map[string]bool{"delay_seconds": true, "process_at": true}

// ParseReschedule decodes and validates a reschedule body at now: exactly
// one of delay_seconds (from now) or process_at, by the rules of a create.
// It returns the new due time, or a *validation.Error.
func (r Rules) ParseReschedule(body []byte, now time.Time) (time.Time, error) {
	verr := &validation.Error{}
	raw := verr.Object(body, rescheduleFields, false)
	if raw == nil {
		return time.Time{}, verr
	}
	_, hasDelay := raw["delay_seconds"]
	_, hasAt := raw["process_at"]
	if !hasDelay && !hasAt {
		verr.Add("delay_seconds", "give delay_seconds or process_at")
		return time.Time{}, verr
	}
	due, _ := r.parseDue(raw, now, verr, verr)
	if err := verr.Err(); err != nil {
		return time.Time{}, err
	}
	return due, nil
}

// parseDue reads delay_seconds or process_at; spelling says how the request
// named the time, for the fingerprint. What is wrong with the body goes to
// verr; what is wrong only at now (process_at's window) goes to late.
func (r Rules) parseDue(raw map[string]json.RawMessage, now time.Time, verr, late *validation.Error) (due time.Time, spelling string) {
	now = now.Truncate(time.Millisecond)
	_, hasDelay := raw["delay_seconds"]
	at, hasAt, atOK := verr.Time(raw, "process_at")
	switch {
	case hasDelay && hasAt:
		verr.Add("process_at", "give delay_seconds or process_at, not both")
	case hasDelay:
		if secs, ok := verr.Int(raw, "delay_seconds", 0, 0, int64(r.MaxDelay/time.Second), false); ok {
			return now.Add(time.Duration(secs) * time.Second), fmt.Sprintf("delay=%d", secs)
		}
	case !hasAt:
		return now.Add(r.DefaultDelay), "default"
	case atOK:
		r.checkAt(at, now, "process_at", late)
		return at, "at=" + clock.Format(at)
	}
	// verr says what is wrong with it
	return time.Time{}, ""
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

func fingerprint(r Request, dueSpelling string) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "amount=%s\x00currency=%s\x00destination=%s\x00%s",
		r.Amount.String(), r.Currency, r.Destination, dueSpelling)
	return hex.EncodeToString(h.Sum(nil))
}
