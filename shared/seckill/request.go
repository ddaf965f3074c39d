package seckill

import (
	"time"

	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

var preheatFields = map[string]bool{"stock": true, "starts_at": true, "ends_at": true, "per_user_limit": true, "shards": true,
	"price": true, "currency": true, "payment_window_seconds": true}

func checkItemID(id string, verr *validation.Error) {
	if !ValidItemID(id) {
		verr.Add("item_id", "must be 1 to 64 of A-Z, a-z, 0-9, _ and -")
	}
}

// parsePreheat validates a preheat body at now; a price follows prices'
// rules (those of a withdrawal's amount).
func parsePreheat(id string, body []byte, now time.Time, prices money.Rules) (Item, error) {
	verr := &validation.Error{}
	checkItemID(id, verr)
	raw := verr.Object(body, preheatFields, false)
	if raw == nil {
		return Item{}, verr
	}
	it := Item{ID: id}
	it.Stock, _ = verr.Int(raw, "stock", 0, 1, MaxStock, true)
	limit, _ := verr.Int(raw, "per_user_limit", 1, 1, MaxPerUserLimit, false)
	shards, shardsOK := verr.Int(raw, "shards", 1, 1, MaxShards, false)
	it.PerUserLimit, it.Shards = int(limit), int(shards)
	if shardsOK && it.Stock > 0 && shards > it.Stock {
		verr.Add("shards", "must not exceed the stock")
	}
	now = now.Truncate(time.Millisecond)
	starts, _, ok := verr.Time(raw, "starts_at")
	if !ok {
		starts = now
	}
	ends, given, ok := verr.Time(raw, "ends_at")
	switch {
	case !given:
		verr.Add("ends_at", "is required")
	case !ok:
	case !ends.After(starts):
		verr.Add("ends_at", "must be after starts_at")
	case !ends.After(now):
		verr.Add("ends_at", "must be in the future")
	}
	it.StartsAt, it.EndsAt = starts, ends
	var priced bool
	it.Price, it.Currency, priced, _ = prices.Parse(verr, raw, "price", "currency", false)
	window, windowOK := verr.Int(raw, "payment_window_seconds", 0, 1, int64(MaxPaymentWindow/time.Second), false)
	if _, given := raw["payment_window_seconds"]; given && windowOK && !priced {
		verr.Add("payment_window_seconds", "needs a price and currency")
	}
	it.Window = time.Duration(window) * time.Second
	if err := verr.Err(); err != nil {
		return Item{}, err
	}
	return it, nil
}

var purchaseFields = map[string]bool{"quantity": true}

// parsePurchase validates a purchase body: empty, or {"quantity":n}.
func parsePurchase(id string, body []byte) (int, error) {
	if len(body) == 0 && ValidItemID(id) {
		return 1, nil // the common case: one unit, no body
	}
	verr := &validation.Error{}
	checkItemID(id, verr)
	qty := int64(1)
	if raw := verr.Object(body, purchaseFields, true); raw != nil {
		qty, _ = verr.Int(raw, "quantity", 1, 1, MaxPerUserLimit, false)
	}
	return int(qty), verr.Err()
}
