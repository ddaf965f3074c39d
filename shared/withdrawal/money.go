package withdrawal

import (
	"encoding/json"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/validation"
)

// ParseMoney reads an amount (a decimal string above 0, at most MaxAmount
// and the currency's minor digits) and its currency (one of Currencies)
// from the fields amountField and currencyField of raw, adding what breaks
// a rule to verr. Unless required, both may be absent. present reports
// whether either field was given; ok that both were, and are valid. The
// flash sale's prices follow the same rules.
func (r Rules) ParseMoney(verr *validation.Error, raw map[string]json.RawMessage, amountField, currencyField string, required bool) (amount decimal.Decimal, currency string, present, ok bool) {
	_, hasAmount := raw[amountField]
	_, hasCurrency := raw[currencyField]
	if !hasAmount && !hasCurrency && !required {
		return decimal.Decimal{}, "", false, false
	}
	text, amountOK := verr.String(raw, amountField)
	currency, currencyOK := verr.String(raw, currencyField)
	if currencyOK && !r.accepts(currency) {
		verr.Add(currencyField, "must be one of %s", strings.Join(r.Currencies, ", "))
		currencyOK = false
	}
	if !amountOK {
		return decimal.Decimal{}, currency, true, false
	}
	m := amountRe.FindStringSubmatch(text)
	if m == nil {
		verr.Add(amountField, "must be a decimal string such as \"125.50\"")
		return decimal.Decimal{}, currency, true, false
	}
	amount = decimal.RequireFromString(text)
	switch {
	case !amount.IsPositive():
		verr.Add(amountField, "must be greater than 0")
	case amount.GreaterThan(r.MaxAmount):
		verr.Add(amountField, "must be at most %s", r.MaxAmount.String())
	case currencyOK && int32(len(m[3])) > minorDigits[currency]:
		verr.Add(amountField, "%s allows at most %d decimal places", currency, minorDigits[currency])
	default:
		return amount, currency, true, currencyOK
	}
	return amount, currency, true, false
}
