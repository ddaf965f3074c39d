// Package money holds the rules of amounts that withdrawals and the flash
// sale share: the currencies Hourglass knows and their minor digits, how an
// amount is written, and how a request's amount and currency are read and
// judged against the configured limits.
package money

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/validation"
)

// minorDigits are ISO 4217 minor units of the currencies Hourglass knows.
var minorDigits = map[string]int32{
	"AUD": 2, "BHD": 3, "BRL": 2, "CAD": 2, "CHF": 2, "CNY": 2, "CZK": 2, "DKK": 2,
	"EUR": 2, "GBP": 2, "HKD": 2, "HUF": 2, "IDR": 2, "INR": 2, "ISK": 0, "JOD": 3,
	"JPY": 0, "KRW": 0, "KWD": 3, "MXN": 2, "MYR": 2, "NOK": 2, "NZD": 2, "OMR": 3,
	"PHP": 2, "PLN": 2, "SEK": 2, "SGD": 2, "THB": 2, "TND": 3, "TRY": 2, "TWD": 2,
	"USD": 2, "VND": 0, "ZAR": 2,
}

// amountRe is an amount as a request writes it: a decimal string, no sign,
// no exponent, no leading zeros.
var amountRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})(\.([0-9]{1,18}))?$`)

// MinorDigits returns the number of decimals currency allows, and whether
// Hourglass knows the currency.
func MinorDigits(currency string) (int32, bool) {
	d, ok := minorDigits[currency]
	return d, ok
}

// Format writes amount with exactly the currency's minor digits.
func Format(amount decimal.Decimal, currency string) string {
	d, ok := minorDigits[currency]
	if !ok {
		return amount.String()
	}
	return amount.StringFixed(d)
}

// Known lists the currencies Hourglass knows, sorted.
func Known() []string {
	out := make([]string, 0, len(minorDigits))
	for c := range minorDigits {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Rules are the configured limits of an amount.
type Rules struct {
	// Currencies accepted, each known to MinorDigits.
	Currencies []string
	// Max is the largest amount accepted, in any currency.
	Max decimal.Decimal
}

// Check reports a rule set that could not work.
func (r Rules) Check() error {
	if len(r.Currencies) == 0 {
		return fmt.Errorf("money: no currency accepted")
	}
	for _, c := range r.Currencies {
		if _, ok := minorDigits[c]; !ok {
			return fmt.Errorf("money: unknown currency %q (known: %s)", c, strings.Join(Known(), ","))
		}
	}
	if !r.Max.IsPositive() {
		return fmt.Errorf("money: maximum amount %s is not positive", r.Max)
	}
	return nil
}

// Accepts reports whether currency is one of r's.
func (r Rules) Accepts(currency string) bool { return slices.Contains(r.Currencies, currency) }

// Parse reads an amount (a decimal string above 0, at most r.Max and the
// currency's minor digits) and its currency (one of r.Currencies) from the
// fields amountField and currencyField of raw, adding what breaks a rule to
// verr. Unless required, both may be absent. present reports whether
// either field was given; ok that both were, and are valid.
func (r Rules) Parse(verr *validation.Error, raw map[string]json.RawMessage, amountField, currencyField string, required bool) (amount decimal.Decimal, currency string, present, ok bool) {
	_, hasAmount := raw[amountField]
	_, hasCurrency := raw[currencyField]
	if !hasAmount && !hasCurrency && !required {
		return decimal.Decimal{}, "", false, false
	}
	text, amountOK := verr.String(raw, amountField)
	currency, currencyOK := verr.String(raw, currencyField)
	if currencyOK && !r.Accepts(currency) {
		verr.Add(currencyField, "must be one of %s", strings.Join(r.Currencies, ", "))
		currencyOK = false
	}
	if amountOK {
		if amountRe.MatchString(text) {
			amount = decimal.RequireFromString(text)
		} else {
			verr.Add(amountField, "must be a decimal string such as \"125.50\"")
			amountOK = false
		}
	}
	ok = r.check(verr, amount, amountOK, currency, currencyOK, amountField, currencyField)
	if !amountOK {
		amount = decimal.Decimal{}
	}
	return amount, currency, true, ok
}

// CheckAmount adds to verr, under amountField and currencyField, what
// breaks a rule of Parse in an amount and currency already typed, and
// reports whether both are valid.
func (r Rules) CheckAmount(verr *validation.Error, amount decimal.Decimal, currency, amountField, currencyField string) bool {
	return r.check(verr, amount, true, currency, true, amountField, currencyField)
}

// check is CheckAmount of the parts that could be read (amountOK,
// currencyOK).
func (r Rules) check(verr *validation.Error, amount decimal.Decimal, amountOK bool, currency string, currencyOK bool, amountField, currencyField string) bool {
	if currencyOK && !r.Accepts(currency) {
		verr.Add(currencyField, "must be one of %s", strings.Join(r.Currencies, ", "))
		currencyOK = false
	}
	if !amountOK {
		return false
	}
	switch {
	case !amount.IsPositive():
		verr.Add(amountField, "must be greater than 0")
	case amount.GreaterThan(r.Max):
		verr.Add(amountField, "must be at most %s", r.Max.String())
	case currencyOK && -amount.Exponent() > minorDigits[currency]:
		verr.Add(amountField, "%s allows at most %d decimal places", currency, minorDigits[currency])
	default:
		return currencyOK
	}
	return false
}
