package withdrawal_test

import (
	"errors"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func digits(currency string) int32 {
	d, _ := money.MinorDigits(currency)
	return d
}

var fuzzDestination = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// FuzzParseRequest: whatever body a client sends, the API's parser and the
// clock's judgement either refuse it with a validation error naming at
// least one field, or give a request and due time that keep every rule of
// SPEC.md; the same body parses the same way twice.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`,
		`{"amount":"1","currency":"USD","destination":"d","process_at":"2026-11-29T11:00:00.250Z"}`,
		`{"amount":"100","currency":"JPY","destination":"d"}`,
		`{"amount":"1000000.00","currency":"CNY","destination":"d","delay_seconds":0}`,
		`{"amount":"0.001","currency":"CNY","destination":"d"}`,
		`{"amount":"1","currency":"USD","destination":"d","delay_seconds":1,"process_at":"2026-11-29T11:00:00Z"}`,
		`{"amount":"1","currency":"USD","destination":"d","delay_seconds":1e3}`,
		`{"amount":"1","currency":"USD","destination":"d","process_at":"2026-11-29T19:00:00.250+08:00"}`,
		`{"amount":"999999999999999999.999999999999999999","currency":"EUR","destination":"d"}`,
		`{"amount":null}`, `[]`, `null`, `{}`, `{"a":1}{"b":2}`, `{"amount":"1","amount":"2"}`, "",
	} {
		f.Add([]byte(s))
	}
	r := rules()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := httpapi.ParseWithdrawal(r, body)
		if err == nil {
			// The clock's judgement, the service's: a time past or too far
			// ahead is refused on process_at alone.
			var due time.Time
			if due, err = r.Due(req.When, t0); err == nil {
				checkParsed(t, r, req, due)
			} else if verr := (*validation.Error)(nil); !errors.As(err, &verr) || verr.Errors[0].Field != "process_at" {
				t.Fatalf("the clock refused %+v with %v, want a validation error on process_at", req.When, err)
			}
		}
		if err != nil {
			var verr *validation.Error
			if !errors.As(err, &verr) || len(verr.Errors) == 0 {
				t.Fatalf("refusal is not a validation error naming a field: %v", err)
			}
			for _, f := range verr.Errors {
				if f.Field == "" || f.Message == "" {
					t.Fatalf("empty field or message in %v", err)
				}
			}
			return
		}
		again, err := httpapi.ParseWithdrawal(r, body)
		if err != nil || again.Fingerprint() != req.Fingerprint() || !again.Amount.Equal(req.Amount) {
			t.Fatalf("second parse differs: %+v %v", again, err)
		}
	})
}

// checkParsed fails t unless req, due at due, keeps every rule of SPEC.md.
func checkParsed(t *testing.T, r withdrawal.Rules, req withdrawal.Request, due time.Time) {
	switch {
	case !req.Amount.IsPositive() || req.Amount.GreaterThan(r.MaxAmount):
		t.Fatalf("amount %s accepted", req.Amount)
	case !slices.Contains(r.Currencies, req.Currency):
		t.Fatalf("currency %q accepted", req.Currency)
	case -req.Amount.Exponent() > digits(req.Currency):
		t.Fatalf("amount %s has more than %s's %d decimals", req.Amount, req.Currency, digits(req.Currency))
	case !fuzzDestination.MatchString(req.Destination):
		t.Fatalf("destination %q accepted", req.Destination)
	case due.Before(t0.Truncate(time.Millisecond)) || due.After(t0.Add(r.MaxDelay)):
		t.Fatalf("due %s outside now..now+max", due)
	case due.Location() != time.UTC || !due.Equal(due.Truncate(time.Millisecond)):
		t.Fatalf("due %s not UTC to the millisecond", due)
	case req.Fingerprint() == "":
		t.Fatal("no fingerprint")
	}
}
