package seckill

import (
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

var fuzzNow = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

// wantRefusal fails unless err is a validation error naming fields.
func wantRefusal(t *testing.T, err error) {
	t.Helper()
	var verr *validation.Error
	if !errors.As(err, &verr) || len(verr.Errors) == 0 {
		t.Fatalf("refusal is not a validation error naming a field: %v", err)
	}
	for _, f := range verr.Errors {
		if f.Field == "" || f.Message == "" {
			t.Fatalf("empty field or message in %v", err)
		}
	}
}

// FuzzParsePurchase: an item id from the path and a body from the client
// give either a quantity within 1..MaxPerUserLimit or a validation error.
func FuzzParsePurchase(f *testing.F) {
	for _, s := range []struct{ id, body string }{
		{"phone-2026", ""}, {"phone-2026", `{"quantity":1}`}, {"phone-2026", `{"quantity":100}`},
		{"phone-2026", `{"quantity":101}`}, {"phone-2026", `{"quantity":1.5}`}, {"phone-2026", `{"quantity":"1"}`},
		{"phone-2026", `{"quantity":1e2}`}, {"phone-2026", `{"qty":1}`}, {"phone-2026", `  `}, {"phone-2026", `null`},
		{"", `{}`}, {"a{b}c", ""}, {"phone%2F2026", ""}, {"x", `{"quantity":-0}`},
	} {
		f.Add(s.id, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		qty, err := parsePurchase(id, body)
		if err != nil {
			wantRefusal(t, err)
			return
		}
		if qty < 1 || qty > MaxPerUserLimit {
			t.Fatalf("quantity %d accepted", qty)
		}
		if !ValidItemID(id) {
			t.Fatalf("item id %q accepted", id)
		}
	})
}

// FuzzParsePreheat: an operator's preheat body either is refused with a
// validation error or gives a sale that keeps every rule of SPEC.md.
func FuzzParsePreheat(f *testing.F) {
	for _, s := range []struct{ id, body string }{
		{"phone-2026", `{"stock":1000,"starts_at":"2026-11-29T10:00:00.250Z","ends_at":"2026-11-29T11:00:00Z","per_user_limit":1,"shards":1}`},
		{"phone-2026", `{"stock":10000000,"ends_at":"2030-01-01T00:00:00Z","shards":64,"per_user_limit":100}`},
		{"phone-2026", `{"stock":2,"ends_at":"2030-01-01T00:00:00Z","shards":3}`},
		{"phone-2026", `{"stock":1,"ends_at":"2026-11-29T09:00:00Z"}`},
		{"phone-2026", `{"stock":1,"starts_at":"2031-01-01T00:00:00Z","ends_at":"2030-01-01T00:00:00Z"}`},
		{"phone-2026", `{"stock":0}`}, {"phone-2026", `{"stock":"1"}`}, {"phone-2026", ``},
		{"bad id!", `{"stock":1,"ends_at":"2030-01-01T00:00:00+08:00"}`},
	} {
		f.Add(s.id, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		it, err := parsePreheat(id, body, fuzzNow, money.Rules{Currencies: []string{"CNY", "JPY"}, Max: decimal.NewFromInt(1000)})
		if err != nil {
			wantRefusal(t, err)
			return
		}
		switch {
		case !ValidItemID(it.ID) || it.ID != id:
			t.Fatalf("item id %q accepted", id)
		case it.Stock < 1 || it.Stock > MaxStock:
			t.Fatalf("stock %d accepted", it.Stock)
		case it.PerUserLimit < 1 || it.PerUserLimit > MaxPerUserLimit:
			t.Fatalf("per-user limit %d accepted", it.PerUserLimit)
		case it.Shards < 1 || it.Shards > MaxShards || int64(it.Shards) > it.Stock:
			t.Fatalf("shards %d accepted for stock %d", it.Shards, it.Stock)
		case !it.EndsAt.After(it.StartsAt) || !it.EndsAt.After(fuzzNow):
			t.Fatalf("window %s..%s accepted at %s", it.StartsAt, it.EndsAt, fuzzNow)
		case it.StartsAt.Location() != time.UTC || it.EndsAt.Location() != time.UTC:
			t.Fatalf("times not in UTC: %s %s", it.StartsAt, it.EndsAt)
		}
	})
}

// FuzzParseOrderJob: an order job id from a queue message either is refused
// with ErrBadOrderJob or names one purchase in exactly the form the store
// writes, so the job it names is the one in the queue.
func FuzzParseOrderJob(f *testing.F) {
	for _, s := range []string{
		"pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|1|0|user-123", "pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|100|63|a|b",
		"pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|+1|0|u", "pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|01|0|u",
		"pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|1|-1|u", "pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|0|0|u",
		"pu_x|1|0|u", "pu_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z|1|0|", "", "|||",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		j, err := parseOrderJob(id)
		if err != nil {
			if !errors.Is(err, ErrBadOrderJob) {
				t.Fatalf("refusal %v is not ErrBadOrderJob", err)
			}
			return
		}
		switch {
		case j.String() != id:
			t.Fatalf("%q parsed as %q", id, j.String())
		case j.qty < 1 || j.qty > MaxPerUserLimit || j.home < 0 || j.home >= MaxShards || j.user == "":
			t.Fatalf("%q accepted as %+v", id, j)
		case j.created().IsZero():
			t.Fatalf("%q accepted without a purchase time", id)
		}
		p := Purchase{ID: j.pid, Quantity: j.qty, Home: j.home, UserID: j.user}
		if OrderJobID(p) != id {
			t.Fatalf("OrderJobID of %+v is %q, want %q", p, OrderJobID(p), id)
		}
	})
}
