package seckill

import (
	"cmp"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/validation"
)

// Sale is the command of a preheat: the flash sale of an item to set up, or
// to reset. An optional field left zero takes its default.
type Sale struct {
	ItemID string
	// Stock is the units on sale, 1..MaxStock.
	Stock int64
	// StartsAt opens the sale (zero: now), EndsAt closes it; both are kept
	// to the millisecond, in UTC.
	StartsAt time.Time
	EndsAt   time.Time
	// PerUserLimit is the units one buyer may buy, 1..MaxPerUserLimit
	// (zero: 1).
	PerUserLimit int
	// Shards is how many stock shards split the stock, 1..MaxShards and at
	// most Stock (zero: 1).
	Shards int
	// Price (zero: none) is the price of one unit in Currency: both or
	// neither.
	Price    decimal.Decimal
	Currency string
	// PaymentWindow (zero: none) is how long an order may be paid, whole
	// seconds up to MaxPaymentWindow; it needs a price.
	PaymentWindow time.Duration
}

// wholeNumber is the refusal of a number out of its range, worded as the
// API's for a field that must be an integer there.
const wholeNumber = "must be a whole number within %d..%d"

func checkItemID(id string, verr *validation.Error) {
	if !ValidItemID(id) {
		verr.Add("item_id", "must be 1 to 64 of A-Z, a-z, 0-9, _ and -")
	}
}

// Check returns a *validation.Error listing every rule s breaks at now,
// each under its field's name in the API (item_id, stock, per_user_limit,
// shards, starts_at, ends_at, price, currency, payment_window_seconds), or
// nil. A price follows prices' rules (those of a withdrawal's amount).
func (s Sale) Check(now time.Time, prices money.Rules) error {
	verr := &validation.Error{}
	checkItemID(s.ItemID, verr)
	stockOK := s.Stock >= 1 && s.Stock <= MaxStock
	if !stockOK {
		verr.Add("stock", wholeNumber, 1, MaxStock)
	}
	if s.PerUserLimit < 0 || s.PerUserLimit > MaxPerUserLimit {
		verr.Add("per_user_limit", wholeNumber, 1, MaxPerUserLimit)
	}
	switch {
	case s.Shards < 0 || s.Shards > MaxShards:
		verr.Add("shards", wholeNumber, 1, MaxShards)
	case stockOK && int64(s.Shards) > s.Stock:
		verr.Add("shards", "must not exceed the stock")
	}
	it := s.item(now)
	now = now.UTC().Truncate(time.Millisecond)
	switch {
	case s.EndsAt.IsZero():
		verr.Add("ends_at", "is required")
	case !it.EndsAt.After(it.StartsAt):
		verr.Add("ends_at", "must be after starts_at")
	case !it.EndsAt.After(now):
		verr.Add("ends_at", "must be in the future")
	}
	priced := checkPrice(verr, s.Price, s.Currency, prices)
	switch w := s.PaymentWindow; {
	case w < 0 || w > MaxPaymentWindow || w%time.Second != 0:
		verr.Add("payment_window_seconds", wholeNumber, 1, int64(MaxPaymentWindow/time.Second))
	case w > 0 && !priced:
		verr.Add("payment_window_seconds", "needs a price and currency")
	}
	return verr.Err()
}

// checkPrice judges a price and its currency by prices' rules, in the order
// and words of money.Rules.Parse; it reports whether either was given.
func checkPrice(verr *validation.Error, price decimal.Decimal, currency string, prices money.Rules) bool {
	if price.IsZero() && currency == "" {
		return false
	}
	if price.IsZero() {
		verr.Add("price", "is required")
	}
	currencyOK := currency != ""
	switch {
	case !currencyOK:
		verr.Add("currency", "is required")
	case !prices.Accepts(currency):
		verr.Add("currency", "must be one of %s", strings.Join(prices.Currencies, ", "))
		currencyOK = false
	}
	if price.IsZero() {
		return true
	}
	// The decimal places as written ("9.990" has three), as a request's
	// amount counts them.
	places := max(-price.Exponent(), 0)
	digits, _ := money.MinorDigits(currency)
	switch {
	case !price.IsPositive():
		verr.Add("price", "must be greater than 0")
	case price.GreaterThan(prices.Max):
		verr.Add("price", "must be at most %s", prices.Max.String())
	case currencyOK && places > digits:
		verr.Add("price", "%s allows at most %d decimal places", currency, digits)
	}
	return true
}

// item is the sale to preheat at now, its defaults filled in.
func (s Sale) item(now time.Time) Item {
	it := Item{ID: s.ItemID, Stock: s.Stock, StartsAt: s.StartsAt.UTC().Truncate(time.Millisecond),
		EndsAt: s.EndsAt.UTC().Truncate(time.Millisecond), PerUserLimit: cmp.Or(s.PerUserLimit, 1),
		Shards: cmp.Or(s.Shards, 1), Price: s.Price, Currency: s.Currency, Window: s.PaymentWindow}
	if s.StartsAt.IsZero() {
		it.StartsAt = now.UTC().Truncate(time.Millisecond)
	}
	return it
}

// CheckPurchase returns a *validation.Error if a purchase of quantity units
// of item itemID breaks a rule (a quantity is 1..MaxPerUserLimit), or nil.
// The per-user limit of the sale is judged by admission.
func CheckPurchase(itemID string, quantity int) error {
	qtyOK := quantity >= 1 && quantity <= MaxPerUserLimit
	if qtyOK && ValidItemID(itemID) {
		return nil // the common case, allocating nothing
	}
	verr := &validation.Error{}
	checkItemID(itemID, verr)
	if !qtyOK {
		verr.Add("quantity", wholeNumber, 1, MaxPerUserLimit)
	}
	return verr.Err()
}
