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

// Order is what the ledger records for a purchase's order; voided, its id
// and CreatedAt (the time it was given up on) are what count.
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

// OrderLedger records orders. Making an order and giving up on it are
// mutually exclusive through one conditional write on the order id: the
// first of CreateOrder and VoidOrder to claim the id wins, for good. Both are
// safe to resend after a lost answer: a write that finds its own (or an
// equal) claim succeeds as the first did.
type OrderLedger interface {
	// CreateOrder makes the order unless its id was voided (ErrOrderVoided).
	// A second call for the same order succeeds without making another. An
	// error wrapping ErrPermanent means the order can never be made.
	CreateOrder(ctx context.Context, o Order) error
	// VoidOrder claims the order id so that the order can never be made;
	// if the order exists already, it reports ordered instead (and the
	// purchase is to be confirmed, not released). Voiding a void id again
	// succeeds.
	VoidOrder(ctx context.Context, o Order) (ordered bool, err error)
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
// its id. If the order id was voided (the compensation pass gave up on it),
// the release is finished: the purchase released, its stock and the
// buyer's limit given back. If the order can never be made, its id is voided
// and the purchase released, unless the void finds the order made (by an
// earlier delivery whose answer was lost): then it is confirmed. Safe under
// duplicate deliveries: each step is idempotent. A nil error means the
// delivery is done with.
func (p *OrderProcessor) Process(ctx context.Context, item string, shard int, jobID string) error {
	job, err := parseOrderJob(jobID)
	if err != nil {
		return err // to the dead-letter queue, where an operator sees it
	}
	pid := job.pid
	log := p.log.With("item_id", item, "purchase_id", pid, "order_id", OrderID(pid))
	pur, err := p.store.purchase(ctx, item, shard, job)
	if errors.Is(err, ErrNoPurchase) {
		log.Warn("order job for a purchase that no longer exists (item preheated again)")
		return nil
	}
	if err != nil {
		return err
	}
	switch pur.Status {
	case Confirmed:
		return nil
	case Released:
		return p.store.giveBack(ctx, pur) // finish a release cut short
	}
	now := p.clock.Now()
	order := orderOf(pur, now)
	err = p.ledger.CreateOrder(ctx, order)
	switch {
	case err == nil:
		_, done, err := p.store.settleOrder(ctx, item, shard, job, Confirmed, order.ID, now)
		if err != nil && !errors.Is(err, ErrNoPurchase) {
			return err
		}
		if done {
			p.Metrics.Count(metrics.OrdersConfirmed, 1, nil)
			log.Info("order made", "quantity", pur.Quantity)
		}
		return nil
	case errors.Is(err, ErrOrderVoided):
		log.Warn("order given up on before it was made; finishing the release")
		_, done, err := p.store.release(ctx, pur, now)
		p.count(Released, done)
		return err
	case errors.Is(err, ErrPermanent):
		log.Error("order cannot be made; releasing the purchase", "error", err.Error())
		status, done, err := p.store.giveUp(ctx, p.ledger, pur, now)
		p.count(status, done)
		return err
	}
	return fmt.Errorf("seckill: make order of %s: %w", pid, err)
}

func (p *OrderProcessor) count(status PurchaseStatus, done bool) {
	switch {
	case !done:
	case status == Confirmed:
		p.Metrics.Count(metrics.OrdersConfirmed, 1, nil)
	case status == Released:
		p.Metrics.Count(metrics.OrdersReleased, 1, nil)
	}
}

// orderOf is the order of reserved purchase pur, made (or voided) at now.
func orderOf(pur Purchase, now time.Time) Order {
	return Order{ID: OrderID(pur.ID), PurchaseID: pur.ID, ItemID: pur.ItemID, UserID: pur.UserID, Quantity: pur.Quantity,
		Shard: pur.Shard, CreatedAt: now.UTC()}
}

// giveUp ends reserved purchase pur, whose order is no longer waited for.
// Its order id is voided in the ledger first: from then on no order can be
// made for it, so releasing it cannot sell its stock twice. If the void finds
// the order made, the purchase is confirmed instead. It returns how the
// purchase ended and whether this call ended it.
func (s *Store) giveUp(ctx context.Context, l OrderLedger, pur Purchase, now time.Time) (PurchaseStatus, bool, error) {
	order := orderOf(pur, now)
	ordered, err := l.VoidOrder(ctx, order)
	if err != nil {
		return Reserved, false, fmt.Errorf("seckill: void order of %s: %w", pur.ID, err)
	}
	if !ordered {
		return s.release(ctx, pur, now)
	}
	got, done, err := s.settleOrder(ctx, pur.ItemID, pur.Shard, jobOf(pur), Confirmed, order.ID, now)
	if errors.Is(err, ErrNoPurchase) {
		return Confirmed, false, nil
	}
	return got.Status, done, err
}

// release ends reserved purchase pur, whose order id is void, as released:
// its stock goes back to its shard, its quantity back to the buyer's limit.
// Run again, it finishes what a run cut short.
func (s *Store) release(ctx context.Context, pur Purchase, now time.Time) (PurchaseStatus, bool, error) {
	got, done, err := s.settleOrder(ctx, pur.ItemID, pur.Shard, jobOf(pur), Released, "", now)
	if errors.Is(err, ErrNoPurchase) {
		return Released, false, nil // the item was preheated again: nothing to give back
	}
	if err != nil {
		return Reserved, false, err
	}
	if got.Status != Released {
		// Only an order confirms a purchase, and its void excludes one.
		return got.Status, false, fmt.Errorf("seckill: purchase %s with a void order is %s", pur.ID, got.Status)
	}
	return Released, done, s.giveBack(ctx, got)
}

// giveBack gives a released purchase's quantity back to its buyer's limit
// (once, however often it runs).
func (s *Store) giveBack(ctx context.Context, pur Purchase) error {
	_, err := s.unclaim(ctx, pur.ItemID, pur.Home, pur.UserID, pur.ID, pur.Quantity, false)
	return err
}
