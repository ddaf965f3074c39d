package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

// Order is what the ledger records for a confirmed purchase.
type Order struct {
	ID         string
	PurchaseID string
	ItemID     string
	UserID     string
	Quantity   int
	// Shard is the item shard of the purchase (where the ledger may keep it).
	Shard     int
	CreatedAt time.Time
}

// OrderLedger records orders. CreateOrder is idempotent on the order id: a
// second call for the same order succeeds without making another. An error
// wrapping ErrPermanent means the order can never be made.
type OrderLedger interface {
	CreateOrder(ctx context.Context, o Order) error
}

// OrderProcessor is the consumer's step for order jobs.
type OrderProcessor struct {
	store  *Store
	ledger OrderLedger
	clock  clock.Clock
	log    *slog.Logger
	// Metrics, if set, counts orders confirmed and released.
	Metrics *metrics.Emitter
}

// NewOrderProcessor returns an OrderProcessor.
func NewOrderProcessor(store *Store, ledger OrderLedger, clk clock.Clock, log *slog.Logger) *OrderProcessor {
	if log == nil {
		log = slog.Default()
	}
	return &OrderProcessor{store: store, ledger: ledger, clock: clk, log: log}
}

// Process makes the order of order job jobID (see OrderJobID) of an item's
// shard: the order goes into the ledger, then the purchase is confirmed with
// its id. If the order
// can never be made, the purchase is released and its stock and the buyer's
// limit given back. Safe under duplicate deliveries: each step is
// idempotent. A nil error means the delivery is done with.
func (p *OrderProcessor) Process(ctx context.Context, item string, shard int, jobID string) error {
	job, err := parseOrderJob(jobID)
	if err != nil {
		return err // to the dead-letter queue, where an operator sees it
	}
	pid := job.pid
	pur, err := p.store.purchase(ctx, item, shard, job)
	if errors.Is(err, ErrNoPurchase) {
		p.log.Warn("order job for a purchase that no longer exists (item preheated again)", "item_id", item, "purchase_id", pid)
		return nil
	}
	if err != nil {
		return err
	}
	switch pur.Status {
	case Confirmed:
		return nil
	case Released:
		return p.giveBack(ctx, pur) // finish a release cut short
	}
	order := Order{ID: OrderID(pid), PurchaseID: pid, ItemID: item, UserID: pur.UserID, Quantity: pur.Quantity,
		Shard: shard, CreatedAt: p.clock.Now().UTC()}
	if err := p.ledger.CreateOrder(ctx, order); err != nil {
		if !errors.Is(err, ErrPermanent) {
			return fmt.Errorf("seckill: make order of %s: %w", pid, err)
		}
		p.log.Error("order cannot be made; releasing the purchase", "item_id", item, "purchase_id", pid, "error", err.Error())
		return p.release(ctx, pur)
	}
	_, done, err := p.store.settleOrder(ctx, item, shard, job, Confirmed, order.ID, p.clock.Now())
	if err != nil && !errors.Is(err, ErrNoPurchase) {
		return err
	}
	if done {
		p.Metrics.Count(metrics.OrdersConfirmed, 1, nil)
	}
	return nil
}

// release ends a reserved purchase as released: its stock goes back to its
// shard, its quantity back to the buyer's limit.
func (p *OrderProcessor) release(ctx context.Context, pur Purchase) error {
	got, done, err := p.store.settleOrder(ctx, pur.ItemID, pur.Shard, jobOf(pur), Released, "", p.clock.Now())
	if errors.Is(err, ErrNoPurchase) {
		return nil
	}
	if err != nil {
		return err
	}
	if done {
		p.Metrics.Count(metrics.OrdersReleased, 1, nil)
	}
	if got.Status != Released {
		return nil // confirmed meanwhile by another delivery
	}
	return p.giveBack(ctx, got)
}

func (p *OrderProcessor) giveBack(ctx context.Context, pur Purchase) error {
	_, err := p.store.unclaim(ctx, pur.ItemID, pur.Home, pur.UserID, pur.ID, pur.Quantity, false)
	return err
}
