package seckill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/orders"
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
	// Amount (a decimal string, "" for an item without a price) and
	// Currency are what the order costs; PayBy, unless zero, is when it
	// expires unpaid.
	Amount   string
	Currency string
	PayBy    time.Time
	// End is how the order ended in the ledger ("" while it awaits
	// payment, or has no payment window), EndedAt when.
	End     OrderEnd
	EndedAt time.Time
}

// OrderEnd is how an order with a payment window ended: paid or expired,
// decided once in the ledger.
type OrderEnd string

// Order ends.
const (
	EndNone    OrderEnd = ""
	EndPaid    OrderEnd = "paid"
	EndExpired OrderEnd = "expired"
)

// Payment is the payment provider's report on an order.
type Payment struct {
	EventID   string
	OrderID   string
	Succeeded bool
	Amount    decimal.Decimal
	Currency  string
	// At is when the report arrived. A succeeded payment made before the
	// order's pay-by time (PaidAt) pays it; at or after, it expires it.
	At time.Time
	// SignedAt is when the provider signed the report (its signature's
	// timestamp), zero if unknown; Grace is how long before At it may lie
	// and still count (the store's payment grace).
	SignedAt time.Time
	Grace    time.Duration
}

// PaidAt is the time the payment is judged by against its order's pay-by
// time: the provider's signed time when it lies within Grace before the
// arrival (a confirmation held up on its way, by the provider's retries or
// a throttled edge, is not the buyer's fault), else the arrival: no signed
// time, one in the future (clocks apart), or one older than the grace.
func (p Payment) PaidAt() time.Time {
	if p.SignedAt.IsZero() || p.SignedAt.After(p.At) || p.At.Sub(p.SignedAt) > p.Grace {
		return p.At
	}
	return p.SignedAt
}

// PaymentOutcome is what a payment event did to its order.
type PaymentOutcome string

// Payment outcomes: paid (it paid the order); failed (the order still
// awaits payment); mismatch (amount or currency not the order's: nothing
// changed); refund (the money came for an order that had expired, or was
// paid already: it must go back to the buyer).
const (
	OutcomePaid     PaymentOutcome = "paid"
	OutcomeFailed   PaymentOutcome = "failed"
	OutcomeMismatch PaymentOutcome = "mismatch"
	OutcomeRefund   PaymentOutcome = "refund"
)

// PaymentResult is a payment event as the ledger applied it: the first
// time, or (Replayed) as recorded then.
type PaymentResult struct {
	Outcome PaymentOutcome
	// End is the order's end once the event was applied; At when it was.
	End      OrderEnd
	At       time.Time
	Replayed bool
}

// DecidePayment is what payment p does to order o as it stands: its outcome
// and the order's end after. Both ledgers apply it with a conditional write
// on what they read, so it is decided once.
func DecidePayment(o Order, p Payment) (PaymentOutcome, OrderEnd) {
	amount, err := decimal.NewFromString(o.Amount)
	switch {
	case err != nil || o.Currency != p.Currency || !amount.Equal(p.Amount):
		return OutcomeMismatch, o.End
	case !p.Succeeded:
		return OutcomeFailed, o.End
	case o.End != EndNone:
		return OutcomeRefund, o.End
	case p.PaidAt().Before(o.PayBy):
		return OutcomePaid, EndPaid
	}
	return OutcomeRefund, EndExpired // it came too late: the order expired
}

// OrderLedger records orders. Making an order and giving up on it are
// mutually exclusive through one conditional write on the order id: the
// first of CreateOrder and VoidOrder to claim the id wins, for good. Both are
// safe to resend after a lost answer: a write that finds its own (or an
// equal) claim succeeds as the first did. An order with a payment window
// ends once, paid or expired, by another conditional write (SettlePayment,
// ExpireOrder): the first wins for good.
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
	// FindOrder returns order o as it stands, ErrNoOrder if there is none
	// (or it was voided). o names it: its ID, and, if known, its ItemID and
	// Shard.
	FindOrder(ctx context.Context, o Order) (Order, error)
	// SettlePayment applies payment event p to its order (by
	// DecidePayment), once per event id: the event again answers as the
	// first time (Replayed). ErrNoOrder if there is no such order.
	SettlePayment(ctx context.Context, p Payment) (Order, PaymentResult, error)
	// ExpireOrder ends order o as expired at now unless it ended already,
	// and returns its end as it stands. Before its pay-by time it changes
	// nothing and answers ErrNotDue.
	ExpireOrder(ctx context.Context, o Order, now time.Time) (OrderEnd, error)
}

// OrderProcessor is the consumer's step for the jobs of an item's order
// queue: order jobs (make the order), expiry jobs (expire an unpaid order
// at its pay-by time) and event jobs (publish an order event).
type OrderProcessor struct {
	store  *Store
	ledger OrderLedger
	clock  clock.Clock
	log    *slog.Logger
	// Metrics, if set, counts orders confirmed, released, paid and expired,
	// and expiries that failed.
	Metrics *metrics.Emitter
	// Publisher, if set, publishes order events; without it they are
	// dropped once due.
	Publisher orders.Publisher
}

// NewOrderProcessor returns an OrderProcessor.
func NewOrderProcessor(store *Store, ledger OrderLedger, clk clock.Clock, log *slog.Logger) *OrderProcessor {
	if log == nil {
		log = slog.Default()
	}
	return &OrderProcessor{store: store, ledger: ledger, clock: clk, log: log}
}

// Process runs job jobID of an item's shard: an expiry job ("ex|..."), an
// event job ("ev|...") or an order job (see OrderJobID). A nil error means
// the delivery is done with; an error, that it must come again.
//
// An order job makes the order: the order goes into the ledger, then the
// purchase is confirmed with its id (or, with a payment window, awaits
// payment; its expiry job is queued). If the order id was voided (the
// compensation pass gave up on it), the release is finished: the purchase
// released, its stock and the buyer's limit given back. If the order can
// never be made, its id is voided and the purchase released, unless the
// void finds the order made (by an earlier delivery whose answer was lost):
// then it is confirmed. Safe under duplicate deliveries: each step is
// idempotent.
func (p *OrderProcessor) Process(ctx context.Context, item string, shard int, jobID string) error {
	switch {
	case strings.HasPrefix(jobID, expiryPrefix):
		return p.expire(ctx, item, shard, jobID)
	case strings.HasPrefix(jobID, eventPrefix):
		return p.publish(ctx, item, jobID)
	}
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
	case Released:
		return p.store.giveBack(ctx, pur) // finish a release cut short
	case Reserved:
	default:
		return nil // the order was made
	}
	set, err := p.store.settings(ctx, item)
	if err != nil {
		return err
	}
	now := p.clock.Now()
	order := orderOf(pur, now)
	order.Amount, order.Currency, order.PayBy = set.terms(pur.Quantity, order.CreatedAt)
	err = p.ledger.CreateOrder(ctx, order)
	switch {
	case err == nil:
		status, done, held, err := p.store.made(ctx, p.ledger, pur, order, now)
		if errors.Is(err, ErrNoPurchase) {
			log.Warn("order made for a purchase that no longer exists (item preheated again)")
			return nil
		}
		if err != nil {
			return err
		}
		p.count(status, done)
		if done {
			log.Info("order made", "quantity", pur.Quantity, "status", status, "amount", order.Amount, "currency", order.Currency)
		}
		if status == AwaitingPayment && held.End != EndNone {
			// Paid (or expired by a late payment) before Redis knew of the
			// order: follow now rather than at the pay-by time.
			got, err := p.store.purchase(ctx, item, shard, job)
			if errors.Is(err, ErrNoPurchase) {
				log.Warn("order paid before Redis knew of it, for a purchase that no longer exists (item preheated again)")
				return nil
			}
			if err != nil {
				return err
			}
			return p.follow(ctx, got, held.End, now, log)
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

// made ends reserved purchase pur, whose order o the ledger holds: confirmed,
// or awaiting payment until the pay-by time the ledger has (an earlier
// delivery may have made the order, at another time).
// It returns the order as the ledger holds it too.
func (s *Store) made(ctx context.Context, l OrderLedger, pur Purchase, o Order, now time.Time) (PurchaseStatus, bool, Order, error) {
	to := Confirmed
	if !o.PayBy.IsZero() {
		held, err := l.FindOrder(ctx, o)
		if err != nil {
			return Reserved, false, o, fmt.Errorf("seckill: read order %s: %w", o.ID, err)
		}
		o, to = held, AwaitingPayment
	}
	got, done, err := s.settleOrder(ctx, pur.ItemID, pur.Shard, jobOf(pur), to, o, now)
	if err != nil {
		return to, false, o, err
	}
	return got.Status, done, o, nil
}

func (p *OrderProcessor) count(status PurchaseStatus, done bool) {
	switch {
	case !done:
	case status == Confirmed || status == AwaitingPayment:
		p.Metrics.Count(metrics.OrdersConfirmed, 1, nil)
	case status == Released:
		p.Metrics.Count(metrics.OrdersReleased, 1, nil)
	case status == Paid:
		p.Metrics.Count(metrics.OrdersPaid, 1, nil)
	case status == Expired:
		p.Metrics.Count(metrics.OrdersExpired, 1, nil)
	}
}

// expire runs expiry job jobID: at the order's pay-by time and the store's
// payment grace after it (never before: a job claimed early is put back at
// it), the ledger decides the order's end
// (expired, unless a payment came first), and the purchase follows it.
func (p *OrderProcessor) expire(ctx context.Context, item string, shard int, jobID string) error {
	err := p.expireJob(ctx, item, shard, jobID)
	if err != nil {
		p.Metrics.Count(metrics.OrderExpiryFailures, 1, nil)
	}
	return err
}

func (p *OrderProcessor) expireJob(ctx context.Context, item string, shard int, jobID string) error {
	job, err := parseOrderJob(strings.TrimPrefix(jobID, expiryPrefix))
	if err != nil {
		return err
	}
	log := p.log.With("item_id", item, "purchase_id", job.pid, "order_id", OrderID(job.pid))
	pur, err := p.store.purchase(ctx, item, shard, job)
	if errors.Is(err, ErrNoPurchase) {
		log.Warn("expiry job for a purchase that no longer exists (item preheated again)")
		return nil
	}
	if err != nil {
		return err
	}
	switch pur.Status {
	case Expired:
		return p.store.giveBack(ctx, pur) // finish an expiry cut short
	case AwaitingPayment:
	default:
		return nil // paid (or never awaiting payment)
	}
	now := p.clock.Now()
	// Not before the grace after the pay-by time has run out: till then a
	// payment signed in time may still be on its way.
	if expireAt := pur.PayBy.Add(p.store.grace); now.Before(expireAt) {
		log.Info("early expiry job put back at its pay-by time and grace", "pay_by", clock.Format(pur.PayBy),
			"expire_at", clock.Format(expireAt))
		return p.store.putBack(ctx, item, shard, jobID, expireAt)
	}
	o := orderOf(pur, pur.UpdatedAt)
	o.PayBy = pur.PayBy
	end, err := p.ledger.ExpireOrder(ctx, o, now)
	if errors.Is(err, ErrNotDue) {
		// The ledger's pay-by time is later than the record's (an order
		// made twice): it decides.
		held, ferr := p.ledger.FindOrder(ctx, o)
		if ferr != nil {
			return ferr
		}
		return p.store.putBack(ctx, item, shard, jobID, held.PayBy.Add(p.store.grace))
	}
	if err != nil {
		return fmt.Errorf("seckill: expire order %s: %w", o.ID, err)
	}
	return p.follow(ctx, pur, end, now, log)
}

// follow brings purchase pur, awaiting payment, to its order's end in the
// ledger: paid, or expired with its stock and the buyer's limit given back.
// Run again, it finishes what a run cut short.
func (p *OrderProcessor) follow(ctx context.Context, pur Purchase, end OrderEnd, now time.Time, log *slog.Logger) error {
	set, err := p.store.settings(ctx, pur.ItemID)
	if err != nil {
		return err
	}
	pur.Amount, pur.Currency, _ = set.terms(pur.Quantity, now)
	to := Paid
	switch end {
	case EndExpired:
		to = Expired
	case EndNone:
		return nil
	}
	got, done, err := p.store.endOrder(ctx, pur, to, now)
	if errors.Is(err, ErrNoPurchase) {
		return nil
	}
	if err != nil {
		return err
	}
	if got.Status != to {
		if got.Status == Expired || got.Status == Paid {
			// Only the ledger's one end moves a purchase on from awaiting
			// payment.
			log.Error("purchase ended otherwise than its order", "status", got.Status, "order_end", end)
		}
		if got.Status != Expired {
			return nil
		}
	}
	p.count(got.Status, done)
	if done {
		log.Info("order "+string(got.Status), "quantity", got.Quantity)
	}
	if got.Status == Expired {
		return p.store.giveBack(ctx, got)
	}
	return nil
}

// ProcessEvent runs job jobID of the events queue (EventsQueue):
// "<item>|" and an event job, published as publish does.
func (p *OrderProcessor) ProcessEvent(ctx context.Context, jobID string) error {
	item, job, ok := strings.Cut(jobID, "|")
	if !ok || !ValidItemID(item) {
		return fmt.Errorf("%w: events queue job %q", ErrBadOrderJob, jobID)
	}
	return p.publish(ctx, item, job)
}

// publish runs event job jobID: the event goes to the Publisher; an error
// leaves the job to be delivered again.
func (p *OrderProcessor) publish(ctx context.Context, item, jobID string) error {
	e, err := parseEventJob(jobID)
	if err != nil {
		return err
	}
	if p.Publisher == nil {
		return nil
	}
	if err := p.Publisher.Publish(ctx, e.event(item)); err != nil {
		return fmt.Errorf("seckill: publish %s of %s: %w", e.typ, OrderID(e.job.pid), err)
	}
	return nil
}

// orderOf is the order of reserved purchase pur, made (or voided) at now.
func orderOf(pur Purchase, now time.Time) Order {
	return Order{ID: OrderID(pur.ID), PurchaseID: pur.ID, ItemID: pur.ItemID, UserID: pur.UserID, Quantity: pur.Quantity,
		Shard: pur.Shard, CreatedAt: now.UTC()}
}

// giveUp ends reserved purchase pur, whose order is no longer waited for.
// Its order id is voided in the ledger first: from then on no order can be
// made for it, so releasing it cannot sell its stock twice. If the void finds
// the order made, the purchase is confirmed (or awaits payment) instead. It
// returns how the purchase ended and whether this call ended it.
func (s *Store) giveUp(ctx context.Context, l OrderLedger, pur Purchase, now time.Time) (PurchaseStatus, bool, error) {
	order := orderOf(pur, now)
	ordered, err := l.VoidOrder(ctx, order)
	if err != nil {
		return Reserved, false, fmt.Errorf("seckill: void order of %s: %w", pur.ID, err)
	}
	if !ordered {
		return s.release(ctx, pur, now)
	}
	held, err := l.FindOrder(ctx, order)
	if err != nil {
		return Reserved, false, fmt.Errorf("seckill: read order %s: %w", order.ID, err)
	}
	status, done, _, err := s.made(ctx, l, pur, held, now)
	if errors.Is(err, ErrNoPurchase) {
		return status, false, nil
	}
	return status, done, err
}

// release ends reserved purchase pur, whose order id is void, as released:
// its stock goes back to its shard, its quantity back to the buyer's limit.
// Run again, it finishes what a run cut short.
func (s *Store) release(ctx context.Context, pur Purchase, now time.Time) (PurchaseStatus, bool, error) {
	got, done, err := s.settleOrder(ctx, pur.ItemID, pur.Shard, jobOf(pur), Released, Order{}, now)
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

// giveBack gives a released or expired purchase's quantity back to its
// buyer's limit (once, however often it runs).
func (s *Store) giveBack(ctx context.Context, pur Purchase) error {
	_, err := s.unclaim(ctx, pur.ItemID, pur.Home, pur.UserID, pur.ID, pur.Quantity, false)
	return err
}
