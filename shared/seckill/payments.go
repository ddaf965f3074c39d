package seckill

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/validation"
)

// ErrPaymentMismatch: a payment's amount or currency is not its order's;
// nothing was paid.
var ErrPaymentMismatch = errors.New("seckill: payment amount or currency is not the order's")

// PaymentAnswer is what the payment provider hears back: the order's state
// once the event is applied (or as it was applied the first time).
type PaymentAnswer struct {
	OrderID string         `json:"order_id"`
	Status  PurchaseStatus `json:"status"`
	// RefundRequired: the money came for an order that had expired (or was
	// paid already by another payment) and must go back to the buyer.
	RefundRequired bool `json:"refund_required"`
	// Result is what the event did: paid, failed, refund or mismatch.
	Result   PaymentOutcome `json:"result"`
	Replayed bool           `json:"replayed"`
}

var (
	eventIDRe      = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)
	currencyCodeRe = regexp.MustCompile(`^[A-Z]{3}$`)
)

// CheckPayment names what is wrong with a payment confirmation (a
// *validation.Error): its event id, its order id, its amount (not
// negative) and its currency (an ISO 4217 code).
func CheckPayment(p Payment) error {
	verr := &validation.Error{}
	if !eventIDRe.MatchString(p.EventID) {
		verr.Add("event_id", "must be 1 to 128 of A-Z, a-z, 0-9, _, ., : and -")
	}
	if len(p.OrderID) > 64 || !eventIDRe.MatchString(p.OrderID) {
		verr.Add("order_id", "is not an order id")
	}
	if p.Amount.IsNegative() {
		verr.Add("amount", `must be a decimal string such as "125.50"`)
	}
	if !currencyCodeRe.MatchString(p.Currency) {
		verr.Add("currency", "must be an ISO 4217 code such as \"CNY\"")
	}
	return verr.Err()
}

// statusOf is how a purchase whose order ended so shows.
func statusOf(end OrderEnd) PurchaseStatus {
	switch end {
	case EndPaid:
		return Paid
	case EndExpired:
		return Expired
	}
	return AwaitingPayment
}

// Pay applies the payment provider's confirmation body to its order: the
// order ledger decides, once per event id (see DecidePayment), and the
// flash sale's state follows (paid; or expired, its stock and the buyer's
// limit given back). A payment that came for an order that had expired or
// was paid already is acknowledged with RefundRequired and a
// payment.refund_required event. A replay answers as the first time and
// finishes what a first run cut short (the ledger written, Redis not).
// The payment is judged by its PaidAt: the provider's signed time
// (pay.SignedAt, set by the caller that checked the signature) within the
// store's payment grace before its arrival, else its arrival.
// ErrNoOrder for an unknown order; ErrPaymentMismatch when the amount or
// currency is not the order's.
func (p *OrderProcessor) Pay(ctx context.Context, pay Payment) (PaymentAnswer, error) {
	if err := CheckPayment(pay); err != nil {
		return PaymentAnswer{}, err
	}
	pay.At, pay.Grace = p.clock.Now().UTC(), p.store.grace
	o, res, err := p.ledger.SettlePayment(ctx, pay)
	if err != nil {
		return PaymentAnswer{}, err
	}
	log := p.log.With("item_id", o.ItemID, "order_id", o.ID, "purchase_id", o.PurchaseID, "payment_event_id", pay.EventID)
	ans := PaymentAnswer{OrderID: o.ID, Status: statusOf(res.End), Result: res.Outcome, Replayed: res.Replayed,
		RefundRequired: res.Outcome == OutcomeRefund}
	if res.Outcome == OutcomeMismatch {
		log.Error("payment amount or currency is not the order's; the order is not paid",
			"order_amount", o.Amount, "order_currency", o.Currency, "payment_amount", pay.Amount.String(),
			"payment_currency", pay.Currency, "replayed", res.Replayed)
		p.Metrics.Count(metrics.PaymentMismatches, 1, nil)
		return ans, fmt.Errorf("%w: order %s costs %s %s", ErrPaymentMismatch, o.ID, o.Amount, o.Currency)
	}
	if o.End != EndNone {
		pur, err := p.store.purchase(ctx, o.ItemID, o.Shard, orderJob{pid: o.PurchaseID, qty: o.Quantity, home: -1, user: o.UserID})
		switch {
		case errors.Is(err, ErrNoPurchase):
		case err != nil:
			return PaymentAnswer{}, err
		default:
			if err := p.follow(ctx, pur, o.End, pay.At, log); err != nil {
				return PaymentAnswer{}, err
			}
		}
	}
	if ans.RefundRequired {
		// Queued again on a replay (the first may have died before it): at
		// least once, one job per event id.
		e := eventJob{typ: orders.RefundRequired, at: res.At, amount: o.Amount, currency: o.Currency, ref: pay.EventID,
			job: orderJob{pid: o.PurchaseID, qty: o.Quantity, home: 0, user: o.UserID}}
		if err := p.store.enqueueEvent(ctx, o.ItemID, o.Shard, e); err != nil {
			return PaymentAnswer{}, err
		}
		if !res.Replayed {
			p.Metrics.Count(metrics.RefundsRequired, 1, nil)
			log.Warn("payment for an order that had ended; a refund is required", "order_end", o.End)
		}
	}
	if !res.Replayed {
		log.Info("payment applied", "result", res.Outcome, "status", ans.Status,
			"arrived_at", clock.Format(pay.At), "judged_at", clock.Format(pay.PaidAt()))
	}
	return ans, nil
}
