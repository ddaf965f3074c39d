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

// FuzzSaleCheck: a sale given by any caller (the API, the CLI, a test) is
// either refused with a validation error, or gives an item that keeps every
// rule of SPEC.md.
func FuzzSaleCheck(f *testing.F) {
	for _, s := range []struct {
		id                   string
		stock                int64
		starts, ends, window int64 // ms from fuzzNow; 0: left out
		limit, shards        int
		price, currency      string
	}{
		{"phone-2026", 1000, 0, 3_600_000, 0, 1, 1, "", ""},
		{"phone-2026", MaxStock, -250, 3_600_000, 0, MaxPerUserLimit, MaxShards, "", ""},
		{"phone-2026", 2, 0, 3_600_000, 0, 0, 3, "", ""},
		{"phone-2026", 1, 0, -1, 0, 0, 0, "", ""},
		{"phone-2026", 1, 7_200_000, 3_600_000, 0, 0, 0, "", ""},
		{"phone-2026", 1, 0, 1, 0, 0, 0, "9.99", "CNY"},
		{"phone-2026", 1, 0, 1, 30_000, 0, 0, "9.999", "CNY"},
		{"phone-2026", 1, 0, 1, 1_500, 0, 0, "1", "JPY"},
		{"phone-2026", 1, 0, 1, 30_000, 0, 0, "", ""},
		{"bad id!", 0, 0, 0, -1, -1, -1, "-1", "XXX"},
	} {
		f.Add(s.id, s.stock, s.starts, s.ends, s.window, s.limit, s.shards, s.price, s.currency)
	}
	prices := money.Rules{Currencies: []string{"CNY", "JPY"}, Max: decimal.NewFromInt(1000)}
	f.Fuzz(func(t *testing.T, id string, stock, starts, ends, window int64, limit, shards int, price, currency string) {
		at := func(ms int64) time.Time {
			if ms == 0 {
				return time.Time{}
			}
			return fuzzNow.Add(time.Duration(ms) * time.Millisecond)
		}
		sale := Sale{ItemID: id, Stock: stock, StartsAt: at(starts), EndsAt: at(ends), PerUserLimit: limit, Shards: shards,
			Currency: currency, PaymentWindow: time.Duration(window) * time.Millisecond}
		if p, err := decimal.NewFromString(price); err == nil {
			sale.Price = p
		}
		if err := sale.Check(fuzzNow, prices); err != nil {
			wantRefusal(t, err)
			return
		}
		it := sale.item(fuzzNow)
		digits, _ := money.MinorDigits(it.Currency)
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
		case it.StartsAt.Location() != time.UTC || it.EndsAt.Location() != time.UTC ||
			!it.StartsAt.Equal(it.StartsAt.Truncate(time.Millisecond)) || !it.EndsAt.Equal(it.EndsAt.Truncate(time.Millisecond)):
			t.Fatalf("times not in UTC to the millisecond: %s %s", it.StartsAt, it.EndsAt)
		case it.Currency == "" != it.Price.IsZero():
			t.Fatalf("price %s and currency %q accepted", it.Price, it.Currency)
		case it.Currency != "" && (!prices.Accepts(it.Currency) || !it.Price.IsPositive() || it.Price.GreaterThan(prices.Max) ||
			!it.Price.Equal(it.Price.Truncate(digits))):
			t.Fatalf("price %s %s accepted", it.Price, it.Currency)
		case it.Window < 0 || it.Window > MaxPaymentWindow || it.Window%time.Second != 0 || (it.Window > 0 && it.Currency == ""):
			t.Fatalf("payment window %s accepted (price %s %s)", it.Window, it.Price, it.Currency)
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
