package ledger_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/seckill"
)

// The order ledgers' payment contract: an order with a payment window ends
// once, paid or expired, whichever conditional write comes first; each
// payment event is applied once and answers as the first time again.

var payT0 = time.Date(2026, 11, 29, 10, 0, 1, 0, time.UTC)

func newPayableOrder(t *testing.T, l seckill.OrderLedger) seckill.Order {
	t.Helper()
	o := newOrder()
	o.Amount, o.Currency, o.PayBy = "19.90", "CNY", payT0.Add(30*time.Second)
	if err := l.CreateOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return o
}

func payment(o seckill.Order, event string, ok bool, amount string, at time.Time) seckill.Payment {
	return seckill.Payment{EventID: event, OrderID: o.ID, Succeeded: ok, Amount: decimal.RequireFromString(amount),
		Currency: o.Currency, At: at}
}

func TestOrderLedgerPayments(t *testing.T) {
	ctx := context.Background()
	for _, c := range orderLedgers(t) {
		t.Run(c.name, func(t *testing.T) {
			l := c.ledger
			settle := func(p seckill.Payment) (seckill.Order, seckill.PaymentResult) {
				t.Helper()
				o, r, err := l.SettlePayment(ctx, p)
				if err != nil {
					t.Fatalf("settle %s: %v", p.EventID, err)
				}
				return o, r
			}
			expire := func(o seckill.Order, now time.Time) (seckill.OrderEnd, error) {
				return l.ExpireOrder(ctx, seckill.Order{ID: o.ID, ItemID: o.ItemID, Shard: o.Shard}, now)
			}
			t.Run("found with its terms, by id alone", func(t *testing.T) {
				o := newPayableOrder(t, l)
				got, err := l.FindOrder(ctx, seckill.Order{ID: o.ID})
				if err != nil || got.Amount != "19.90" || got.Currency != "CNY" || !got.PayBy.Equal(o.PayBy) ||
					got.ItemID != o.ItemID || got.PurchaseID != o.PurchaseID || got.Quantity != 1 || got.End != seckill.EndNone {
					t.Fatalf("found %+v %v", got, err)
				}
				if _, err := l.FindOrder(ctx, seckill.Order{ID: "or_nope"}); !errors.Is(err, seckill.ErrNoOrder) {
					t.Fatalf("unknown order: %v", err)
				}
			})
			t.Run("paid in time, then never expired", func(t *testing.T) {
				o := newPayableOrder(t, l)
				if _, err := expire(o, o.PayBy.Add(-time.Millisecond)); !errors.Is(err, seckill.ErrNotDue) {
					t.Fatalf("expire a millisecond early: %v, want ErrNotDue", err)
				}
				got, r := settle(payment(o, "e1", true, "19.9", o.PayBy.Add(-time.Millisecond)))
				if r.Outcome != seckill.OutcomePaid || r.End != seckill.EndPaid || r.Replayed || got.End != seckill.EndPaid {
					t.Fatalf("payment: %+v %+v", got, r)
				}
				if _, r := settle(payment(o, "e1", true, "19.9", o.PayBy.Add(time.Hour))); r.Outcome != seckill.OutcomePaid || !r.Replayed {
					t.Fatalf("replay: %+v, want paid, replayed", r)
				}
				if end, err := expire(o, o.PayBy); err != nil || end != seckill.EndPaid {
					t.Fatalf("expire a paid order: %s %v, want paid", end, err)
				}
				// A second payment of a paid order is money to give back.
				if _, r := settle(payment(o, "e2", true, "19.90", o.PayBy.Add(-time.Millisecond))); r.Outcome != seckill.OutcomeRefund || r.End != seckill.EndPaid {
					t.Fatalf("second payment: %+v, want refund of a paid order", r)
				}
			})
			t.Run("expired, then a payment is refunded", func(t *testing.T) {
				o := newPayableOrder(t, l)
				if _, r := settle(payment(o, "f1", false, "19.90", o.PayBy.Add(-time.Second))); r.Outcome != seckill.OutcomeFailed || r.End != seckill.EndNone {
					t.Fatalf("failed payment: %+v", r)
				}
				for range 2 {
					if end, err := expire(o, o.PayBy); err != nil || end != seckill.EndExpired {
						t.Fatalf("expire at the pay-by time: %s %v", end, err)
					}
				}
				got, r := settle(payment(o, "p1", true, "19.90", o.PayBy.Add(-time.Second)))
				if r.Outcome != seckill.OutcomeRefund || r.End != seckill.EndExpired || got.End != seckill.EndExpired {
					t.Fatalf("payment after the expiry: %+v %+v, want refund, expired", got, r)
				}
				// The failed event, replayed, answers as it did then.
				if _, r := settle(payment(o, "f1", false, "19.90", o.PayBy)); r.Outcome != seckill.OutcomeFailed || r.End != seckill.EndNone || !r.Replayed {
					t.Fatalf("replayed failure: %+v", r)
				}
			})
			t.Run("a payment at the pay-by time expires the order", func(t *testing.T) {
				o := newPayableOrder(t, l)
				got, r := settle(payment(o, "late", true, "19.90", o.PayBy))
				if r.Outcome != seckill.OutcomeRefund || got.End != seckill.EndExpired {
					t.Fatalf("%+v %+v, want refund, expired", got, r)
				}
				if end, err := expire(o, o.PayBy); err != nil || end != seckill.EndExpired {
					t.Fatalf("expire: %s %v", end, err)
				}
			})
			t.Run("a wrong amount or currency changes nothing", func(t *testing.T) {
				o := newPayableOrder(t, l)
				if _, r := settle(payment(o, "m1", true, "19.91", payT0)); r.Outcome != seckill.OutcomeMismatch || r.End != seckill.EndNone {
					t.Fatalf("%+v", r)
				}
				p := payment(o, "m2", true, "19.90", payT0)
				p.Currency = "USD"
				if _, r := settle(p); r.Outcome != seckill.OutcomeMismatch {
					t.Fatalf("%+v", r)
				}
				if _, r := settle(payment(o, "m3", true, "19.90", payT0)); r.Outcome != seckill.OutcomePaid {
					t.Fatalf("the right payment after wrong ones: %+v", r)
				}
			})
			t.Run("nothing to pay", func(t *testing.T) {
				plain := newOrder()
				if err := l.CreateOrder(ctx, plain); err != nil {
					t.Fatal(err)
				}
				voided := newOrder()
				voided.Amount, voided.Currency, voided.PayBy = "1", "CNY", payT0.Add(time.Minute)
				if _, err := l.VoidOrder(ctx, voided); err != nil {
					t.Fatal(err)
				}
				if err := l.CreateOrder(ctx, voided); !errors.Is(err, seckill.ErrOrderVoided) {
					t.Fatal(err)
				}
				for _, o := range []seckill.Order{plain, voided, {ID: "or_never"}} {
					if _, _, err := l.SettlePayment(ctx, payment(o, "n", true, "1", payT0)); !errors.Is(err, seckill.ErrNoOrder) {
						t.Errorf("pay %s: %v, want ErrNoOrder", o.ID, err)
					}
				}
			})
			t.Run("payments and expiries at once end one way", func(t *testing.T) {
				for round := range 10 {
					o := newPayableOrder(t, l)
					var wg sync.WaitGroup
					start := make(chan struct{})
					results := make([]seckill.PaymentResult, 4)
					ends := make([]seckill.OrderEnd, 4)
					for i := range 4 {
						wg.Go(func() {
							<-start
							_, r, err := l.SettlePayment(ctx, payment(o, "race-"+strconv.Itoa(i), true, "19.90", o.PayBy.Add(-time.Millisecond)))
							if err != nil {
								t.Errorf("pay: %v", err)
							}
							results[i] = r
						})
						wg.Go(func() {
							<-start
							end, err := expire(o, o.PayBy)
							if err != nil {
								t.Errorf("expire: %v", err)
							}
							ends[i] = end
						})
					}
					close(start)
					wg.Wait()
					held, err := l.FindOrder(ctx, o)
					if err != nil {
						t.Fatal(err)
					}
					paid := 0
					for i := range 4 {
						if ends[i] != held.End {
							t.Fatalf("round %d: an expiry answered %s, the order is %s", round, ends[i], held.End)
						}
						if results[i].Outcome == seckill.OutcomePaid {
							paid++
						} else if results[i].Outcome != seckill.OutcomeRefund {
							t.Fatalf("round %d: payment %+v", round, results[i])
						}
					}
					if (held.End == seckill.EndPaid) != (paid == 1) || paid > 1 {
						t.Fatalf("round %d: order %s, %d payments paid it", round, held.End, paid)
					}
				}
			})
		})
	}
}
