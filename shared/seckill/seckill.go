// Package seckill is the flash sale: an item's stock is preheated into Redis,
// and each purchase attempt is admitted or refused by one Lua script on one
// hash slot (sale window, per-user limit, stock, order backlog), which also
// enqueues the order job in that slot, so admission and enqueue are one step.
// Orders are then created asynchronously by the consumer.
//
// Stock may be split over N shards (for Redis Cluster), each a hash-tagged
// slot that is also a shard of the item's order queue. See Service.Purchase
// for how a user's purchases stay within the per-user limit across shards.
package seckill

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/shopspring/decimal"
)

// JobKind is the kind of order jobs.
const JobKind = "seckill.order"

// QueuePrefix starts the name of every item's order queue: "sk:<item>".
const QueuePrefix = "sk:"

// QueueName is the order queue of item.
func QueueName(item string) string { return QueuePrefix + item }

// Limits of a preheat.
const (
	MaxStock        = 10_000_000
	MaxShards       = 64
	MaxPerUserLimit = 100
)

// Status of an item as the public sees it.
type Status string

// Item statuses.
const (
	Upcoming Status = "upcoming"
	Live     Status = "live"
	SoldOut  Status = "sold_out"
	Ended    Status = "ended"
)

// PurchaseStatus is where an admitted purchase stands.
type PurchaseStatus string

// Purchase statuses: reserved on admission, then confirmed (the order exists)
// or released (its order id is void in the ledger, so the order can never
// be made; the stock went back). An item with a payment window makes the
// order awaiting_payment instead of confirmed, which ends paid, or expired
// (unpaid at its pay-by time: the stock went back, and the buyer's limit).
const (
	Reserved        PurchaseStatus = "reserved"
	Confirmed       PurchaseStatus = "confirmed"
	Released        PurchaseStatus = "released"
	AwaitingPayment PurchaseStatus = "awaiting_payment"
	Paid            PurchaseStatus = "paid"
	Expired         PurchaseStatus = "expired"
)

// MaxPaymentWindow is the longest payment window of a preheat.
const MaxPaymentWindow = 24 * time.Hour

// Item is the configuration of a flash sale, as preheated.
type Item struct {
	ID           string
	Stock        int64
	StartsAt     time.Time
	EndsAt       time.Time
	PerUserLimit int
	Shards       int
	// Version changes with every preheat; it invalidates what containers
	// remember of the item.
	Version int64
	// Price (zero: none) is the price of one unit in Currency; Window, if
	// not zero, is how long after its order is made a purchase may be paid.
	Price    decimal.Decimal
	Currency string
	Window   time.Duration
}

// State is an item's public state: where the sale stands, and its terms.
type State struct {
	ItemID       string `json:"item_id"`
	Status       Status `json:"status"`
	StockLeft    int64  `json:"stock_left"`
	StartsAt     string `json:"starts_at"`
	EndsAt       string `json:"ends_at"`
	PerUserLimit int    `json:"per_user_limit"`
	// Price (with the currency's minor digits, as order amounts are
	// written) and Currency are null for an item without a price;
	// PaymentWindowSeconds is null without a payment window. A buyer sees
	// what an order will cost and how long it may be paid before buying.
	Price                *string `json:"price"`
	Currency             *string `json:"currency"`
	PaymentWindowSeconds *int64  `json:"payment_window_seconds"`
}

// Purchase is one admitted purchase.
type Purchase struct {
	ID       string
	ItemID   string
	UserID   string
	Quantity int
	Status   PurchaseStatus
	OrderID  string
	// Shard holds the purchase (where its stock was taken); Home is the
	// user's home shard, which counts the user's purchases.
	Shard     int
	Home      int
	Requeues  int
	CreatedAt time.Time
	UpdatedAt time.Time
	// PayBy is when an order awaiting payment expires (zero without a
	// payment window); Amount and Currency are what the order costs
	// (empty for an item without a price).
	PayBy    time.Time
	Amount   string
	Currency string
}

// Domain outcomes, mapped to HTTP problems at the edge.
var (
	ErrNotFound   = errors.New("seckill: no such item")
	ErrNoPurchase = errors.New("seckill: no purchase")
	ErrNotStarted = errors.New("seckill: sale not started")
	ErrEnded      = errors.New("seckill: sale ended")
	ErrSoldOut    = errors.New("seckill: sold out")
	// ErrNotEnoughLeft: some stock is left, but not the quantity asked for
	// in any one shard; a smaller quantity may still be admitted. It is an
	// ErrSoldOut for this quantity, but never remembered as the item's.
	ErrNotEnoughLeft    = fmt.Errorf("%w: not enough left for the quantity asked for", ErrSoldOut)
	ErrAlreadyPurchased = errors.New("seckill: per-user limit reached")
	ErrBacklogFull      = errors.New("seckill: order backlog full")
	// ErrOrdersPending: a preheat would drop admitted purchases whose order
	// is not made yet.
	ErrOrdersPending = errors.New("seckill: admitted purchases still wait for their orders")
	// ErrPreheatInProgress: another preheat of the item is under way; the
	// preheat changed nothing.
	ErrPreheatInProgress = errors.New("seckill: another preheat of the item is under way")
	// ErrPreheatAbandoned: the preheat outlived its deadline and another
	// container finished it: rolled back, or rolled forward and maybe
	// followed by a later preheat. The item's state says which.
	ErrPreheatAbandoned = errors.New("seckill: the preheat outlived its deadline and was finished by another container")
	// ErrPreheating: a purchase reached a shard frozen by a preheat under
	// way; it changed nothing and may be retried shortly.
	ErrPreheating = errors.New("seckill: the item is being preheated; retry shortly")
	// ErrBadOrderJob: an order job id this version cannot read.
	ErrBadOrderJob = errors.New("seckill: unreadable order job")
	// ErrPermanent marks an order that can never be created.
	ErrPermanent = errors.New("seckill: order refused")
	// ErrOrderVoided: the order id was voided (see OrderLedger.VoidOrder);
	// no order can be made for the purchase, which is released.
	ErrOrderVoided = errors.New("seckill: order voided")
	// ErrNoOrder: no order has the id (or it was voided).
	ErrNoOrder = errors.New("seckill: no such order")
	// ErrNotDue: an expiry asked for before the order's pay-by time.
	ErrNotDue = errors.New("seckill: order not due to expire")
)

var itemIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidItemID reports whether id can name an item.
func ValidItemID(id string) bool { return itemIDRe.MatchString(id) }
