package httpapi

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
)

var (
	preheatFields = map[string]bool{"stock": true, "starts_at": true, "ends_at": true, "per_user_limit": true, "shards": true,
		"price": true, "currency": true, "payment_window_seconds": true}
	// preheatOrder ranks a preheat's fields as a problem lists them; the
	// path's item_id, the body itself and unknown fields rank first. Price
	// and currency rank alike: money.Rules.Parse orders them.
	preheatOrder = map[string]int{"stock": 1, "per_user_limit": 2, "shards": 3, "starts_at": 4, "ends_at": 5,
		"price": 6, "currency": 6, "payment_window_seconds": 7}
	purchaseFields = map[string]bool{"quantity": true}
	purchaseOrder  = map[string]int{"quantity": 1}
)

// ParsePreheat reads the preheat body of item itemID into the sale it asks
// for, judged at now by the flash sale's rules (seckill.Sale.Check; prices
// are those of a price), so that one problem lists every field wrong,
// unreadable or breaking a rule, as the service alone would refuse them.
func ParsePreheat(itemID string, body []byte, now time.Time, prices money.Rules) (seckill.Sale, error) {
	read := &validation.Error{}
	sale := seckill.Sale{ItemID: itemID}
	raw := read.Object(body, preheatFields, false)
	if raw == nil {
		// Nothing was read: only the path's item id can be judged.
		return seckill.Sale{}, judged(read, sale.Check(now, prices), preheatOrder, func(string) bool { return true })
	}
	// What cannot be read is left at its default, and then not judged
	// again: its reading said what is wrong with it.
	sale.Stock, _ = read.Int(raw, "stock", 0, 1, seckill.MaxStock, true)
	limit, _ := read.Int(raw, "per_user_limit", 1, 1, seckill.MaxPerUserLimit, false)
	shards, _ := read.Int(raw, "shards", 1, 1, seckill.MaxShards, false)
	sale.PerUserLimit, sale.Shards = int(limit), int(shards)
	sale.StartsAt, _, _ = read.Time(raw, "starts_at")
	sale.EndsAt, _, _ = read.Time(raw, "ends_at")
	sale.Price, sale.Currency, _, _ = prices.Parse(read, raw, "price", "currency", false)
	window, _ := read.Int(raw, "payment_window_seconds", 0, 1, int64(seckill.MaxPaymentWindow/time.Second), false)
	sale.PaymentWindow = time.Duration(window) * time.Second
	unread := map[string]bool{}
	for _, f := range read.Errors {
		unread[f.Field] = preheatFields[f.Field]
	}
	// A window needs a price: one given but unreadable is still given.
	unread["payment_window_seconds"] = unread["payment_window_seconds"] || unread["price"] || unread["currency"]
	if err := judged(read, sale.Check(now, prices), preheatOrder, func(f string) bool { return unread[f] }); err != nil {
		return seckill.Sale{}, err
	}
	return sale, nil
}

// ParsePurchase reads the purchase body of item itemID, empty (one unit) or
// {"quantity":n}, into the quantity it asks for, judged by the flash sale's
// rules (seckill.CheckPurchase); a *validation.Error lists what is wrong.
func ParsePurchase(itemID string, body []byte) (int, error) {
	if len(body) == 0 && seckill.ValidItemID(itemID) {
		return 1, nil // the common case: one unit, no body, nothing allocated
	}
	read := &validation.Error{}
	qty := int64(1)
	if raw := read.Object(body, purchaseFields, true); raw != nil {
		qty, _ = read.Int(raw, "quantity", 1, 1, seckill.MaxPerUserLimit, false)
	}
	// An unreadable quantity is read as 1, which breaks no rule.
	if err := judged(read, seckill.CheckPurchase(itemID, int(qty)), purchaseOrder, func(string) bool { return false }); err != nil {
		return 0, err
	}
	return int(qty), nil
}

// judged adds to read (what reading a body refused) the domain's refusals
// in rules but those of fields skipped (not read, so not judged), and
// returns them all as one *validation.Error, or nil, in a fixed order
// whatever step found them: the path's item_id, the body itself and
// unknown fields, then the body's fields by rank.
func judged(read *validation.Error, rules error, rank map[string]int, skip func(field string) bool) error {
	var domain *validation.Error
	if rules != nil && !errors.As(rules, &domain) {
		return rules
	}
	var all, judged []validation.Field
	if domain != nil {
		judged = domain.Errors
	}
	for _, f := range judged {
		if f.Field == "item_id" {
			all = append(all, f)
		}
	}
	all = append(all, read.Errors...)
	for _, f := range judged {
		if f.Field != "item_id" && !skip(f.Field) {
			all = append(all, f)
		}
	}
	slices.SortStableFunc(all, func(a, b validation.Field) int { return cmp.Compare(rank[a.Field], rank[b.Field]) })
	read.Errors = all
	return read.Err()
}
