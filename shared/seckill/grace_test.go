package seckill_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/seckill"
)

// TestPaymentJudgedBySignedTime: with a payment grace of 5 minutes, a
// confirmation the provider signed before the order's pay-by time pays it
// even when it arrives after (a delayed webhook), where it used to expire
// the order with refund_required; one signed at or after pay-by, or whose
// signed time is in the future or older than the grace, is judged by its
// arrival as before. The unpaid order waits the grace before it expires,
// so the delayed payment finds it open. Time is the fake clock's.
func TestPaymentJudgedBySignedTime(t *testing.T) {
	const grace = 5 * time.Minute
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newEventSale(t, b, seckill.WithPaymentGrace(grace))
		s.preheat("phone", 5, 1, terms{"9.99", "CNY", 30 * time.Second})
		users := []string{"alice", "bob", "carol", "dave", "erin"}
		order := map[string]string{}
		for _, u := range users {
			order[u] = seckill.OrderID(s.buy("phone", u).ID)
		}
		s.poll() // the orders are made, awaiting payment
		payBy := s.clk.Now().Add(30 * time.Second)
		status := func(user string) seckill.PurchaseStatus {
			t.Helper()
			p, err := s.svc.Mine(ctx, "phone", user)
			if err != nil {
				t.Fatal(err)
			}
			if !p.PayBy.Equal(payBy) {
				t.Fatalf("%s's pay-by %s, want %s", user, p.PayBy, payBy)
			}
			return p.Status
		}
		pay := func(user string, signedAt time.Time) seckill.PaymentAnswer {
			t.Helper()
			ans, err := httpapi.ApplySignedPayment(ctx, s.proc, payBody("evt-"+user, order[user], "succeeded", "9.99", "CNY"), signedAt)
			if err != nil {
				t.Fatalf("%s's payment: %v", user, err)
			}
			return ans
		}

		// Two minutes past pay-by: no order has expired yet.
		s.clk.Set(payBy.Add(2 * time.Minute))
		s.poll()
		for _, u := range users {
			if st := status(u); st != seckill.AwaitingPayment {
				t.Fatalf("%s within the grace: %s, want awaiting_payment", u, st)
			}
		}
		// Signed a second before pay-by, arriving two minutes after: paid.
		if ans := pay("alice", payBy.Add(-time.Second)); ans.Status != seckill.Paid || ans.RefundRequired {
			t.Errorf("alice, signed in time: %+v, want paid", ans)
		}
		// Signed at pay-by: too late, as before.
		if ans := pay("bob", payBy); ans.Status != seckill.Expired || !ans.RefundRequired {
			t.Errorf("bob, signed at pay-by: %+v, want expired with a refund", ans)
		}
		// Signed "in the future" (clocks apart): judged by its arrival.
		if ans := pay("carol", s.clk.Now().Add(time.Minute)); ans.Status != seckill.Expired || !ans.RefundRequired {
			t.Errorf("carol, signed in the future: %+v, want expired with a refund", ans)
		}

		// Just before the grace runs out dave's and erin's orders still
		// wait; once it has, the expiry job expires dave's.
		s.clk.Set(payBy.Add(grace - time.Millisecond))
		s.poll()
		if st := status("dave"); st != seckill.AwaitingPayment {
			t.Fatalf("dave before the grace ran out: %s", st)
		}
		// Signed in time but arriving past the grace (older than the grace
		// allows; the signature's tolerance refuses it at the edge anyway):
		// judged by its arrival.
		s.clk.Set(payBy.Add(grace + time.Second))
		if ans := pay("erin", payBy.Add(-time.Second)); ans.Status != seckill.Expired || !ans.RefundRequired {
			t.Errorf("erin, signed in time, arriving past the grace: %+v, want expired with a refund", ans)
		}
		s.poll()
		if st := status("dave"); st != seckill.Expired {
			t.Fatalf("dave after the grace: %s, want expired", st)
		}
		if got := s.events(orders.Paid); !slices.Equal(got, []string{"alice"}) {
			t.Errorf("order.paid for %q, want alice's", got)
		}
		if got := s.events(orders.Expired); !slices.Equal(got, []string{"bob", "carol", "dave", "erin"}) {
			t.Errorf("order.expired for %q", got)
		}
		// Four units came back; alice's stays sold.
		st, err := s.svc.State(ctx, "phone")
		if err != nil || st.StockLeft != 4 {
			t.Errorf("stock left %d (%v), want 4", st.StockLeft, err)
		}
	})
}
