package money_test

import (
	"encoding/json"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ amount, currency, want string }{
		{"125.5", "CNY", "125.50"}, {"100", "JPY", "100"}, {"0.01", "USD", "0.01"}, {"7", "KWD", "7.000"},
		{"1.5", "XXX", "1.5"}, // unknown: as it is
	} {
		if got := money.Format(decimal.RequireFromString(tc.amount), tc.currency); got != tc.want {
			t.Errorf("Format(%s %s) = %s, want %s", tc.amount, tc.currency, got, tc.want)
		}
	}
}

func TestCheck(t *testing.T) {
	good := money.Rules{Currencies: []string{"CNY", "JPY"}, Max: decimal.NewFromInt(100)}
	if err := good.Check(); err != nil {
		t.Fatalf("Check(%v) = %v", good, err)
	}
	for _, bad := range []money.Rules{
		{Max: decimal.NewFromInt(1)},
		{Currencies: []string{"CNY", "XXX"}, Max: decimal.NewFromInt(1)},
		{Currencies: []string{"CNY"}},
	} {
		if bad.Check() == nil {
			t.Errorf("Check(%v) accepted a rule set that cannot work", bad)
		}
	}
}

func TestParse(t *testing.T) {
	r := money.Rules{Currencies: []string{"CNY", "JPY"}, Max: decimal.NewFromInt(100)}
	for _, tc := range []struct {
		body     string
		required bool
		want     string // amount as parsed, "" when refused
		fields   []string
	}{
		{`{"amount":"12.50","currency":"CNY"}`, true, "12.5", nil},
		{`{"amount":"100","currency":"JPY"}`, true, "100", nil},
		{`{}`, false, "", nil}, // neither, not required: nothing to say
		{`{}`, true, "", []string{"amount", "currency"}},
		{`{"amount":"1.5","currency":"JPY"}`, true, "", []string{"amount"}},    // JPY has no minor digits
		{`{"amount":"100.01","currency":"CNY"}`, true, "", []string{"amount"}}, // over the maximum
		{`{"amount":"0","currency":"CNY"}`, true, "", []string{"amount"}},
		{`{"amount":"01","currency":"CNY"}`, true, "", []string{"amount"}},
		{`{"amount":"1e2","currency":"CNY"}`, true, "", []string{"amount"}},
		{`{"amount":"1","currency":"USD"}`, true, "", []string{"currency"}}, // known, not accepted
	} {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(tc.body), &raw); err != nil {
			t.Fatal(err)
		}
		var verr validation.Error
		amount, _, _, ok := r.Parse(&verr, raw, "amount", "currency", tc.required)
		var fields []string
		for _, e := range verr.Errors {
			fields = append(fields, e.Field)
		}
		switch {
		case tc.want != "" && (!ok || amount.String() != tc.want):
			t.Errorf("%s: got %s ok=%v (%v), want %s", tc.body, amount, ok, fields, tc.want)
		case tc.want == "" && ok:
			t.Errorf("%s: accepted %s", tc.body, amount)
		case len(fields) != len(tc.fields):
			t.Errorf("%s: refused fields %v, want %v", tc.body, fields, tc.fields)
		}
	}
}
