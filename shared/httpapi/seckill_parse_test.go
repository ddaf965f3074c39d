package httpapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
)

var (
	parseNow    = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)
	parsePrices = money.Rules{Currencies: []string{"CNY", "JPY"}, Max: decimal.NewFromInt(1000)}
)

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

// refused returns the fields and messages of a validation error.
func refused(t *testing.T, err error) []validation.Field {
	t.Helper()
	var verr *validation.Error
	if !errors.As(err, &verr) {
		t.Fatalf("%v, want a validation error", err)
	}
	return verr.Errors
}

// TestParsePreheat: a preheat body's reading and the flash sale's rules
// answer as one problem, every field wrong listed once, in the order of
// the API's fields; an accepted body gives the sale it asks for, its defaults left to
// the service.
func TestParsePreheat(t *testing.T) {
	const window = `"stock":1,"ends_at":"2026-11-30T10:00:00Z"`
	for _, tc := range []struct {
		name, id, body string
		want           []validation.Field
	}{
		{name: "price without currency", body: `{` + window + `,"price":"9.99"}`,
			want: []validation.Field{{Field: "currency", Message: "is required"}}},
		{name: "currency without price", body: `{` + window + `,"currency":"CNY"}`,
			want: []validation.Field{{Field: "price", Message: "is required"}}},
		{name: "too many decimals", body: `{` + window + `,"price":"9.999","currency":"CNY"}`,
			want: []validation.Field{{Field: "price", Message: "CNY allows at most 2 decimal places"}}},
		{name: "decimals in JPY", body: `{` + window + `,"price":"1.5","currency":"JPY"}`,
			want: []validation.Field{{Field: "price", Message: "JPY allows at most 0 decimal places"}}},
		{name: "price 0", body: `{` + window + `,"price":"0","currency":"CNY"}`,
			want: []validation.Field{{Field: "price", Message: "must be greater than 0"}}},
		{name: "price -1", body: `{` + window + `,"price":"-1","currency":"CNY"}`,
			want: []validation.Field{{Field: "price", Message: `must be a decimal string such as "125.50"`}}},
		{name: "price a number", body: `{` + window + `,"price":9.99,"currency":"CNY"}`,
			want: []validation.Field{{Field: "price", Message: "must be a string"}}},
		{name: "currency not accepted", body: `{` + window + `,"price":"1","currency":"XXX"}`,
			want: []validation.Field{{Field: "currency", Message: "must be one of CNY, JPY"}}},
		{name: "window without price", body: `{` + window + `,"payment_window_seconds":30}`,
			want: []validation.Field{{Field: "payment_window_seconds", Message: "needs a price and currency"}}},
		{name: "window 0", body: `{` + window + `,"price":"1","currency":"CNY","payment_window_seconds":0}`,
			want: []validation.Field{{Field: "payment_window_seconds", Message: "must be a whole number within 1..86400"}}},
		{name: "window 86401", body: `{` + window + `,"price":"1","currency":"CNY","payment_window_seconds":86401}`,
			want: []validation.Field{{Field: "payment_window_seconds", Message: "must be a whole number within 1..86400"}}},
		{name: "window 1.5", body: `{` + window + `,"price":"1","currency":"CNY","payment_window_seconds":1.5}`,
			want: []validation.Field{{Field: "payment_window_seconds", Message: "must be a whole number within 1..86400"}}},
		{name: "window with an unreadable price is not judged again", body: `{` + window + `,"price":5,"payment_window_seconds":30}`,
			want: []validation.Field{{Field: "price", Message: "must be a string"}, {Field: "currency", Message: "is required"}}},
		{name: "per_user_limit 0", body: `{` + window + `,"per_user_limit":0}`,
			want: []validation.Field{{Field: "per_user_limit", Message: "must be a whole number within 1..100"}}},
		{name: "shards over the stock", body: `{"stock":2,"shards":3,"ends_at":"2026-11-30T10:00:00Z"}`,
			want: []validation.Field{{Field: "shards", Message: "must not exceed the stock"}}},
		{name: "missing ends_at", body: `{"stock":1}`,
			want: []validation.Field{{Field: "ends_at", Message: "is required"}}},
		{name: "ends_at before a bad starts_at's now", body: `{"stock":1,"starts_at":1,"ends_at":"2026-11-29T10:00:00.250Z"}`,
			want: []validation.Field{{Field: "starts_at", Message: "must be an RFC 3339 time string"}, {Field: "ends_at", Message: "must be after starts_at"}}},
		{name: "empty body", body: ``,
			want: []validation.Field{{Field: "body", Message: "must be a JSON object"}}},
		{name: "bad item id and no object", id: "a b", body: `[]`,
			want: []validation.Field{{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"}, {Field: "body", Message: "must be a JSON object"}}},
		{name: "every field wrong, in the fields' order", id: "a b",
			body: `{"zeta":1,"payment_window_seconds":30,"ends_at":"2026-11-29T09:00:00Z","shards":3,"stock":2,"per_user_limit":101,"item_id":"x"}`,
			want: []validation.Field{
				{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"},
				{Field: "item_id", Message: "unknown field"},
				{Field: "zeta", Message: "unknown field"},
				{Field: "per_user_limit", Message: "must be a whole number within 1..100"},
				{Field: "shards", Message: "must not exceed the stock"},
				{Field: "ends_at", Message: "must be after starts_at"}, // starts_at left out: now
				{Field: "payment_window_seconds", Message: "needs a price and currency"},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.id
			if id == "" {
				id = "phone-2026"
			}
			_, err := httpapi.ParsePreheat(id, []byte(tc.body), parseNow, parsePrices)
			if diff := cmp.Diff(tc.want, refused(t, err)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.body, diff)
			}
		})
	}

	sale, err := httpapi.ParsePreheat("tea", []byte(`{"stock":5,"ends_at":"2026-11-30T10:00:00.1234Z","price":"9.90","currency":"CNY","payment_window_seconds":30}`),
		parseNow, parsePrices)
	want := seckill.Sale{ItemID: "tea", Stock: 5, EndsAt: time.Date(2026, 11, 30, 10, 0, 0, 123_000_000, time.UTC), PerUserLimit: 1, Shards: 1,
		Price: decimal.RequireFromString("9.90"), Currency: "CNY", PaymentWindow: 30 * time.Second}
	if err != nil || !sale.Price.Equal(want.Price) {
		t.Fatalf("accepted body: %+v %v", sale, err)
	}
	sale.Price = want.Price
	if diff := cmp.Diff(want, sale); diff != "" {
		t.Errorf("accepted body (-want +got):\n%s", diff)
	}
}

// TestParsePurchase: a purchase body is empty (one unit) or {"quantity":n};
// what is wrong with it and with the item id is one problem.
func TestParsePurchase(t *testing.T) {
	for _, tc := range []struct {
		id, body string
		qty      int
		want     []validation.Field
	}{
		{id: "phone-2026", qty: 1},
		{id: "phone-2026", body: `{}`, qty: 1},
		{id: "phone-2026", body: `{"quantity":100}`, qty: 100},
		{id: "phone-2026", body: `{"quantity":101}`, want: []validation.Field{{Field: "quantity", Message: "must be a whole number within 1..100"}}},
		{id: "phone-2026", body: `{"quantity":null}`, want: []validation.Field{{Field: "quantity", Message: "must be a whole number within 1..100"}}},
		{id: "phone-2026", body: `{"qty":1}`, want: []validation.Field{{Field: "qty", Message: "unknown field"}}},
		{id: "a b", want: []validation.Field{{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"}}},
		{id: "a b", body: `null`, want: []validation.Field{{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"},
			{Field: "body", Message: "must be a JSON object"}}},
		{id: "a b", body: `{"quantity":0,"coupon":"x"}`, want: []validation.Field{{Field: "item_id", Message: "must be 1 to 64 of A-Z, a-z, 0-9, _ and -"},
			{Field: "coupon", Message: "unknown field"}, {Field: "quantity", Message: "must be a whole number within 1..100"}}},
	} {
		qty, err := httpapi.ParsePurchase(tc.id, []byte(tc.body))
		if tc.want == nil {
			if err != nil || qty != tc.qty {
				t.Errorf("%q %s: %d %v, want %d", tc.id, tc.body, qty, err, tc.qty)
			}
			continue
		}
		if diff := cmp.Diff(tc.want, refused(t, err)); diff != "" {
			t.Errorf("%q %s (-want +got):\n%s", tc.id, tc.body, diff)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = httpapi.ParsePurchase("phone-2026", nil) }); n != 0 {
		t.Errorf("an empty purchase body costs %v allocations, want none", n)
	}
}

// TestPurchaseViewOf: a purchase as the API shows it, null where a field
// does not apply.
func TestPurchaseViewOf(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)
	p := seckill.Purchase{ID: "pu_1", ItemID: "tea", UserID: "alice", Quantity: 2, Status: seckill.Reserved, CreatedAt: at}
	if diff := cmp.Diff(httpapi.PurchaseView{PurchaseID: "pu_1", ItemID: "tea", Status: seckill.Reserved, Quantity: 2,
		CreatedAt: "2026-11-29T10:00:00.250Z"}, httpapi.PurchaseViewOf(p)); diff != "" {
		t.Errorf("reserved (-want +got):\n%s", diff)
	}
	p.Status, p.OrderID, p.PayBy, p.Amount, p.Currency = seckill.AwaitingPayment, "or_1", at.Add(30*time.Second), "19.80", "CNY"
	v := httpapi.PurchaseViewOf(p)
	str := func(s *string) string {
		if s == nil {
			return "<nil>"
		}
		return *s
	}
	if got := [4]string{str(v.OrderID), str(v.PayBy), str(v.Amount), str(v.Currency)}; got != [4]string{"or_1", clock.Format(p.PayBy), "19.80", "CNY"} {
		t.Errorf("awaiting payment: %q", got)
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
		qty, err := httpapi.ParsePurchase(id, body)
		if err != nil {
			wantRefusal(t, err)
			return
		}
		if qty < 1 || qty > seckill.MaxPerUserLimit {
			t.Fatalf("quantity %d accepted", qty)
		}
		if err := seckill.CheckPurchase(id, qty); err != nil {
			t.Fatalf("item id %q, quantity %d accepted: the service refuses them: %v", id, qty, err)
		}
	})
}

// FuzzParsePreheat: an operator's preheat body either is refused with a
// validation error or gives a sale that keeps every rule of SPEC.md, one
// the service accepts.
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
		it, err := httpapi.ParsePreheat(id, body, parseNow, parsePrices)
		if err != nil {
			wantRefusal(t, err)
			return
		}
		starts := it.StartsAt
		if starts.IsZero() {
			starts = parseNow
		}
		switch {
		case !seckill.ValidItemID(it.ItemID) || it.ItemID != id:
			t.Fatalf("item id %q accepted", id)
		case it.Stock < 1 || it.Stock > seckill.MaxStock:
			t.Fatalf("stock %d accepted", it.Stock)
		case it.PerUserLimit < 1 || it.PerUserLimit > seckill.MaxPerUserLimit:
			t.Fatalf("per-user limit %d accepted", it.PerUserLimit)
		case it.Shards < 1 || it.Shards > seckill.MaxShards || int64(it.Shards) > it.Stock:
			t.Fatalf("shards %d accepted for stock %d", it.Shards, it.Stock)
		case !it.EndsAt.After(starts) || !it.EndsAt.After(parseNow):
			t.Fatalf("window %s..%s accepted at %s", starts, it.EndsAt, parseNow)
		case it.StartsAt.Location() != time.UTC || it.EndsAt.Location() != time.UTC:
			t.Fatalf("times not in UTC: %s %s", it.StartsAt, it.EndsAt)
		}
		if err := it.Check(parseNow, parsePrices); err != nil {
			t.Fatalf("%+v accepted: the service refuses it: %v", it, err)
		}
	})
}
