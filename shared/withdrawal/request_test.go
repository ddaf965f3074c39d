package withdrawal_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

func rules() withdrawal.Rules {
	return withdrawal.Rules{
		Currencies:   []string{"CNY", "USD", "EUR", "JPY"},
		MaxAmount:    decimal.RequireFromString("1000000"),
		DefaultDelay: 30 * time.Minute,
		MaxDelay:     30 * 24 * time.Hour,
	}
}

// TestValidation walks every rule of SPEC.md "Withdrawals" and checks that a
// refused request stores nothing at all.
func TestValidation(t *testing.T) {
	long := strings.Repeat("a", 65)
	cases := []struct {
		name   string
		key    string
		body   string
		fields []string // fields named in errors; nil means valid
		due    time.Duration
	}{
		{name: "valid with delay", body: `{"amount":"125.50","currency":"CNY","destination":"bank_6222","delay_seconds":1800}`, due: 30 * time.Minute},
		{name: "valid default delay", body: `{"amount":"1","currency":"USD","destination":"d"}`, due: 30 * time.Minute},
		{name: "valid zero delay", body: `{"amount":"0.01","currency":"EUR","destination":"d","delay_seconds":0}`},
		{name: "valid longest delay", body: `{"amount":"1","currency":"USD","destination":"d","delay_seconds":2592000}`, due: 30 * 24 * time.Hour},
		{name: "valid process_at", body: `{"amount":"1","currency":"USD","destination":"d","process_at":"2026-11-29T11:00:00.250Z"}`, due: time.Hour},
		{name: "valid process_at with offset", body: `{"amount":"1","currency":"USD","destination":"d","process_at":"2026-11-29T19:00:00.250+08:00"}`, due: time.Hour},
		{name: "valid JPY whole", body: `{"amount":"100","currency":"JPY","destination":"d"}`, due: 30 * time.Minute},
		{name: "valid max amount", body: `{"amount":"1000000.00","currency":"CNY","destination":"d"}`, due: 30 * time.Minute},
		{name: "valid 64-char destination", body: `{"amount":"1","currency":"CNY","destination":"` + long[:64] + `"}`, due: 30 * time.Minute},

		{name: "amount missing", body: `{"currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount as number", body: `{"amount":125.5,"currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount null", body: `{"amount":null,"currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount empty", body: `{"amount":"","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount words", body: `{"amount":"ten","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount zero", body: `{"amount":"0.00","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount negative", body: `{"amount":"-1","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount exponent", body: `{"amount":"1e3","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount plus sign", body: `{"amount":"+5","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount leading zero", body: `{"amount":"05","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount spaces", body: `{"amount":" 5","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount too precise CNY", body: `{"amount":"125.505","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount fraction JPY", body: `{"amount":"100.5","currency":"JPY","destination":"d"}`, fields: []string{"amount"}},
		{name: "amount over max", body: `{"amount":"1000000.01","currency":"CNY","destination":"d"}`, fields: []string{"amount"}},
		{name: "currency missing", body: `{"amount":"1","destination":"d"}`, fields: []string{"currency"}},
		{name: "currency not accepted", body: `{"amount":"1","currency":"GBP","destination":"d"}`, fields: []string{"currency"}},
		{name: "currency lower case", body: `{"amount":"1","currency":"cny","destination":"d"}`, fields: []string{"currency"}},
		{name: "currency number", body: `{"amount":"1","currency":156,"destination":"d"}`, fields: []string{"currency"}},
		{name: "destination missing", body: `{"amount":"1","currency":"CNY"}`, fields: []string{"destination"}},
		{name: "destination empty", body: `{"amount":"1","currency":"CNY","destination":""}`, fields: []string{"destination"}},
		{name: "destination too long", body: `{"amount":"1","currency":"CNY","destination":"` + long + `"}`, fields: []string{"destination"}},
		{name: "destination space", body: `{"amount":"1","currency":"CNY","destination":"bank 6222"}`, fields: []string{"destination"}},
		{name: "destination slash", body: `{"amount":"1","currency":"CNY","destination":"bank/6222"}`, fields: []string{"destination"}},
		{name: "destination unicode", body: `{"amount":"1","currency":"CNY","destination":"银行"}`, fields: []string{"destination"}},
		{name: "delay negative", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":-1}`, fields: []string{"delay_seconds"}},
		{name: "delay fraction", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":1.5}`, fields: []string{"delay_seconds"}},
		{name: "delay string", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":"10"}`, fields: []string{"delay_seconds"}},
		{name: "delay over max", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":2592001}`, fields: []string{"delay_seconds"}},
		{name: "delay huge", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":1e30}`, fields: []string{"delay_seconds"}},
		{name: "delay and process_at", body: `{"amount":"1","currency":"CNY","destination":"d","delay_seconds":1,"process_at":"2026-11-29T11:00:00Z"}`, fields: []string{"process_at"}},
		{name: "process_at not a time", body: `{"amount":"1","currency":"CNY","destination":"d","process_at":"tomorrow"}`, fields: []string{"process_at"}},
		{name: "process_at number", body: `{"amount":"1","currency":"CNY","destination":"d","process_at":1764410400}`, fields: []string{"process_at"}},
		{name: "process_at past", body: `{"amount":"1","currency":"CNY","destination":"d","process_at":"2026-11-29T09:59:59Z"}`, fields: []string{"process_at"}},
		{name: "process_at beyond max", body: `{"amount":"1","currency":"CNY","destination":"d","process_at":"2026-12-30T10:00:01Z"}`, fields: []string{"process_at"}},
		{name: "unknown field", body: `{"amount":"1","currency":"CNY","destination":"d","memo":"x"}`, fields: []string{"memo"}},
		{name: "every field wrong", body: `{"amount":"-1","currency":"XXX","destination":"","delay_seconds":-5,"x":1}`,
			fields: []string{"x", "currency", "amount", "destination", "delay_seconds"}},
		{name: "bad JSON", body: `{"amount":"1",`, fields: []string{"body"}},
		{name: "array body", body: `[1,2]`, fields: []string{"body"}},
		{name: "null body", body: `null`, fields: []string{"body"}},
		{name: "empty body", body: ``, fields: []string{"body"}},
		{name: "trailing data", body: `{"amount":"1","currency":"CNY","destination":"d"} {}`, fields: []string{"body"}},
		{name: "key missing", key: "-", body: `{"amount":"1","currency":"CNY","destination":"d"}`, fields: []string{"Idempotency-Key"}},
		{name: "key too long", key: strings.Repeat("k", 256), body: `{"amount":"1","currency":"CNY","destination":"d"}`, fields: []string{"Idempotency-Key"}},
		{name: "key not ASCII", key: "clé", body: `{"amount":"1","currency":"CNY","destination":"d"}`, fields: []string{"Idempotency-Key"}},
		{name: "key control char", key: "a\tb", body: `{"amount":"1","currency":"CNY","destination":"d"}`, fields: []string{"Idempotency-Key"}},
		{name: "key and body wrong", key: "-", body: `{}`, fields: []string{"Idempotency-Key", "amount", "currency", "destination"}},
	}
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		env := newEnv(t, b, clock.NewFake(t0))
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := context.Background()
				if err := b.Client.FlushAll(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				key := tc.key
				switch key {
				case "":
					key = "key-" + tc.name
				case "-":
					key = ""
				}
				c, err := httpapi.CreateWithdrawal(ctx, env.svc, "alice", key, []byte(tc.body))
				if tc.fields == nil {
					if err != nil {
						t.Fatalf("valid request refused: %v", err)
					}
					w, err := env.svc.Get(ctx, "alice", c.ID)
					if err != nil {
						t.Fatal(err)
					}
					if got := w.DueAt.Sub(t0); got != tc.due {
						t.Fatalf("due in %s, want %s", got, tc.due)
					}
					return
				}
				var verr *validation.Error
				if !errors.As(err, &verr) {
					t.Fatalf("got %v, want a validation error", err)
				}
				var got []string
				for _, f := range verr.Errors {
					got = append(got, f.Field)
					if f.Message == "" {
						t.Errorf("field %s has no message", f.Field)
					}
				}
				if diff := cmp.Diff(tc.fields, got); diff != "" {
					t.Fatalf("fields (-want +got):\n%s", diff)
				}
				if n, err := b.Client.DBSize(ctx).Result(); err != nil || n != 0 {
					t.Fatalf("refused request left %d keys (%v)", n, err)
				}
			})
		}
	})
}

func TestFingerprintIgnoresSpelling(t *testing.T) {
	r := rules()
	a, err := httpapi.ParseWithdrawal(r, []byte(`{"amount":"125.5","currency":"CNY","destination":"d","delay_seconds":60}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := httpapi.ParseWithdrawal(r, []byte(`{ "delay_seconds": 60, "destination": "d", "currency": "CNY", "amount": "125.50" }`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Fatal("the same request spelled differently has another fingerprint")
	}
	c, _ := httpapi.ParseWithdrawal(r, []byte(`{"amount":"125.51","currency":"CNY","destination":"d","delay_seconds":60}`))
	d, _ := httpapi.ParseWithdrawal(r, []byte(`{"amount":"125.5","currency":"CNY","destination":"d"}`))
	if c.Fingerprint() == a.Fingerprint() || d.Fingerprint() == a.Fingerprint() {
		t.Fatal("different requests share a fingerprint")
	}
}

func TestRulesCheck(t *testing.T) {
	good := rules()
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*withdrawal.Rules){
		"no currency":      func(r *withdrawal.Rules) { r.Currencies = nil },
		"unknown currency": func(r *withdrawal.Rules) { r.Currencies = []string{"XXX"} },
		"zero max":         func(r *withdrawal.Rules) { r.MaxAmount = decimal.Zero },
		"default over max": func(r *withdrawal.Rules) { r.DefaultDelay = r.MaxDelay + 1 },
	} {
		r := rules()
		mutate(&r)
		if r.Check() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
