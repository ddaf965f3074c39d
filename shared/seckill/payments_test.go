package seckill_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/validation"
)

// paySale is a flash sale with a payment window over one order backend: its
// service, its order processor (which publishes into events) and the fake
// clock both run on.
type paySale struct {
	b     orderBackend
	clk   *clock.Fake
	store *seckill.Store
	svc   *seckill.Service
	proc  *seckill.OrderProcessor

	mu     sync.Mutex
	events []orders.Event
}

func newPaySale(t *testing.T, b orderBackend) *paySale {
	t.Helper()
	s := &paySale{b: b, clk: clock.NewFake(t0), store: seckill.NewStore(b.rdb, "hg:")}
	svc, err := seckill.NewService(seckill.Config{Store: s.store, Clock: s.clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.svc = svc
	s.proc = s.processor(s.clk)
	return s
}

// processor returns an order processor of the sale on clk.
func (s *paySale) processor(clk clock.Clock) *seckill.OrderProcessor {
	p := seckill.NewOrderProcessor(s.store, s.b.ledger(), clk, quiet)
	p.Publisher = orders.PublisherFunc(func(_ context.Context, e orders.Event) error {
		s.mu.Lock()
		s.events = append(s.events, e)
		s.mu.Unlock()
		return nil
	})
	return p
}

// terms are a sale's price of one unit and its payment window; zero: none.
type terms struct {
	price, currency string
	window          time.Duration
}

// of returns sale on these terms.
func (tm terms) of(sale seckill.Sale) seckill.Sale {
	if tm.price != "" {
		sale.Price = decimal.RequireFromString(tm.price)
	}
	sale.Currency, sale.PaymentWindow = tm.currency, tm.window
	return sale
}

// preheat opens a sale of stock units of item on tm until a day after t0.
func (s *paySale) preheat(t *testing.T, item string, stock int, tm terms) {
	t.Helper()
	sale := tm.of(seckill.Sale{ItemID: item, Stock: int64(stock), EndsAt: t0.Add(24 * time.Hour)})
	if _, err := s.svc.Preheat(context.Background(), sale); err != nil {
		t.Fatal(err)
	}
}

// run hands every job of item due by the clock to the processor until none
// is left due; it returns the ids of the jobs run.
func (s *paySale) run(t *testing.T, item string) []string {
	t.Helper()
	q, err := s.store.Queue(item, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for range 10 {
		jobs := handOver(t, q, s.clk.Now())
		if len(jobs) == 0 {
			return ran
		}
		for _, j := range jobs {
			if err := s.proc.Process(context.Background(), item, j.Shard, j.ID); err != nil {
				t.Fatalf("job %s: %v", j.ID, err)
			}
			ran = append(ran, j.ID)
		}
	}
	t.Fatal("jobs keep coming")
	return nil
}

func (s *paySale) mine(t *testing.T, item, user string) seckill.Purchase {
	t.Helper()
	p, err := s.svc.Mine(context.Background(), item, user)
	if err != nil {
		t.Fatalf("%s's purchase: %v", user, err)
	}
	return p
}

func (s *paySale) stats(t *testing.T, item string) seckill.ItemStats {
	t.Helper()
	all, err := s.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return all[item]
}

// conserved fails unless every unit of item is left, reserved, awaiting
// payment, paid or confirmed, and sold = paid + awaiting + confirmed.
func (s *paySale) conserved(t *testing.T, item string, stock int64) {
	t.Helper()
	st := s.stats(t, item)
	sold := st.AwaitingPayment + st.Paid + st.Confirmed
	reserved := stock - st.StockLeft - sold
	if reserved != 0 || sold > stock || st.StockLeft < 0 {
		t.Fatalf("stock %d not conserved: %+v (reserved %d)", stock, st, reserved)
	}
}

func payBody(event, order, status, amount, currency string) []byte {
	return fmt.Appendf(nil, `{"event_id":%q,"order_id":%q,"status":%q,"amount":%q,"currency":%q}`,
		event, order, status, amount, currency)
}

func (s *paySale) pay(t *testing.T, body []byte) seckill.PaymentAnswer {
	t.Helper()
	ans, err := httpapi.ApplyPayment(context.Background(), s.proc, body)
	if err != nil {
		t.Fatalf("pay %s: %v", body, err)
	}
	return ans
}

func (s *paySale) published(types ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.events {
		if len(types) == 0 || slices.Contains(types, e.Type) {
			out = append(out, e.Type+" "+e.UserID+" "+e.Amount+" "+e.Currency)
		}
	}
	return out
}

// TestPaymentWindow is the README walkthrough as a test, on every order
// backend: two buyers' orders await payment; one pays (a replay answers as
// the first time), the other does not and expires at its pay-by time to the
// millisecond (not a millisecond before, even if its job is claimed early);
// the unit goes back and a third buyer gets it; the second buyer's limit is
// restored; a late payment is acknowledged as expired with a refund
// required, and never revives the order; every step's event goes out.
func TestPaymentWindow(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		s.preheat(t, "phone", 2, terms{"9.99", "CNY", 30 * time.Second})
		alice, err := s.svc.Purchase(ctx, "phone", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		bob, err := s.svc.Purchase(ctx, "phone", "bob", 1)
		if err != nil {
			t.Fatal(err)
		}
		s.clk.Advance(250 * time.Millisecond) // orders made a little after admission
		made := s.clk.Now()
		s.run(t, "phone")
		payBy := made.Add(30 * time.Second)
		for _, u := range []string{"alice", "bob"} {
			p := s.mine(t, "phone", u)
			if p.Status != seckill.AwaitingPayment || !p.PayBy.Equal(payBy) || p.Amount != "9.99" ||
				p.Currency != "CNY" || p.OrderID == "" {
				t.Fatalf("%s: %+v, want awaiting payment of 9.99 CNY by %s", u, p, clock.Format(payBy))
			}
		}
		if st := s.stats(t, "phone"); st.AwaitingPayment != 2 || st.StockLeft != 0 || st.Confirmed != 0 {
			t.Fatalf("stats %+v, want 2 awaiting payment", st)
		}
		if got := s.published(); !slices.Equal(got, []string{"order.created alice 9.99 CNY", "order.created bob 9.99 CNY"}) {
			t.Fatalf("events %q", got)
		}

		// Alice pays; the provider resends the event.
		s.clk.Advance(10 * time.Second)
		body := payBody("evt_a1", seckill.OrderID(alice.ID), "succeeded", "9.990", "CNY")
		first := s.pay(t, body)
		if first.Status != seckill.Paid || first.RefundRequired || first.Replayed {
			t.Fatalf("alice's payment: %+v", first)
		}
		if p := s.mine(t, "phone", "alice"); p.Status != seckill.Paid {
			t.Fatalf("alice once her payment is answered: %s, want paid", p.Status)
		}
		again := s.pay(t, body)
		if again.Status != seckill.Paid || again.Result != first.Result || !again.Replayed {
			t.Fatalf("replay: %+v, want %+v replayed", again, first)
		}
		// Bob's payment fails; he may pay again before his pay-by time.
		failed := s.pay(t, payBody("evt_b1", seckill.OrderID(bob.ID), "failed", "9.99", "CNY"))
		if failed.Status != seckill.AwaitingPayment || failed.Result != seckill.OutcomeFailed {
			t.Fatalf("bob's failed payment: %+v", failed)
		}
		// A wrong amount pays nothing, and answers so again.
		for range 2 {
			_, err := httpapi.ApplyPayment(ctx, s.proc, payBody("evt_b2", seckill.OrderID(bob.ID), "succeeded", "9.98", "CNY"))
			if !errors.Is(err, seckill.ErrPaymentMismatch) {
				t.Fatalf("wrong amount: %v, want ErrPaymentMismatch", err)
			}
		}
		if _, err := httpapi.ApplyPayment(ctx, s.proc, payBody("evt_b3", seckill.OrderID(bob.ID), "succeeded", "9.99", "USD")); !errors.Is(err, seckill.ErrPaymentMismatch) {
			t.Fatalf("wrong currency: %v, want ErrPaymentMismatch", err)
		}
		if _, err := httpapi.ApplyPayment(ctx, s.proc, payBody("evt_x", "or_01KB0000000000000000000000", "succeeded", "9.99", "CNY")); !errors.Is(err, seckill.ErrNoOrder) {
			t.Fatalf("unknown order: %v, want ErrNoOrder", err)
		}
		for _, bad := range []string{`{"event_id":"e","order_id":"o","status":"succeeded","amount":"1","currency":"CNY","x":1}`,
			`{"event_id":"e","order_id":"o","status":"paid","amount":"1","currency":"CNY"}`,
			`{"event_id":"e|1","order_id":"o","status":"failed","amount":"1.0.0","currency":"cny"}`} {
			var verr *validation.Error
			if _, err := httpapi.ApplyPayment(ctx, s.proc, []byte(bad)); !errors.As(err, &verr) {
				t.Fatalf("%s: %v, want a validation error", bad, err)
			}
		}
		if p := s.mine(t, "phone", "bob"); p.Status != seckill.AwaitingPayment {
			t.Fatalf("bob after failed and wrong payments: %s", p.Status)
		}
		s.conserved(t, "phone", 2)

		// A millisecond before bob's pay-by time nothing is due; his expiry
		// job claimed early anyway (another clock) is put back.
		s.clk.Set(payBy.Add(-time.Millisecond))
		if ran := s.run(t, "phone"); slices.ContainsFunc(ran, func(id string) bool { return id[:3] == "ex|" }) {
			t.Fatalf("an expiry job ran early: %q", ran)
		}
		expiry := "ex|" + seckill.OrderJobID(s.mine(t, "phone", "bob"))
		if err := s.proc.Process(ctx, "phone", 0, expiry); err != nil {
			t.Fatal(err)
		}
		q, _ := s.store.Queue("phone", 1)
		if due, ok, err := q.DueAt(ctx, 0, expiry); err != nil || !ok || !due.Equal(payBy) {
			t.Fatalf("early expiry job: due %s %v %v, want put back at %s", due, ok, err, payBy)
		}
		if p := s.mine(t, "phone", "bob"); p.Status != seckill.AwaitingPayment {
			t.Fatalf("bob expired early: %s", p.Status)
		}
		if _, err := s.svc.Purchase(ctx, "phone", "carol", 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("carol before the expiry: %v, want sold out", err)
		}

		// At bob's pay-by time his order expires, and the unit sells again.
		s.clk.Set(payBy)
		s.run(t, "phone")
		if p := s.mine(t, "phone", "bob"); p.Status != seckill.Expired {
			t.Fatalf("bob at his pay-by time: %s, want expired", p.Status)
		}
		if p := s.mine(t, "phone", "alice"); p.Status != seckill.Paid {
			t.Fatalf("alice: %s, want paid", p.Status)
		}
		if st := s.stats(t, "phone"); st.Paid != 1 || st.Expired != 1 || st.AwaitingPayment != 0 || st.StockLeft != 1 || st.Admitted != 2 {
			t.Fatalf("stats after the expiry %+v", st)
		}
		s.conserved(t, "phone", 2)
		if _, err := s.svc.Purchase(ctx, "phone", "carol", 1); err != nil {
			t.Fatalf("carol after the expiry: %v", err)
		}
		// Bob's limit came back: the unit is gone, not his right to buy.
		if _, err := s.svc.Purchase(ctx, "phone", "bob", 1); !errors.Is(err, seckill.ErrSoldOut) {
			t.Fatalf("bob again: %v, want sold out (his limit restored)", err)
		}

		// Bob's payment arrives late: acknowledged, never reviving the order.
		for range 2 {
			late := s.pay(t, payBody("evt_b4", seckill.OrderID(bob.ID), "succeeded", "9.99", "CNY"))
			if late.Status != seckill.Expired || !late.RefundRequired {
				t.Fatalf("late payment: %+v, want expired with a refund required", late)
			}
		}
		s.run(t, "phone")
		if p, err := s.store.Purchase(ctx, "phone", 0, seckill.OrderJobID(bob)); err != nil || p.Status != seckill.Expired {
			t.Fatalf("bob after his late payment: %+v %v", p, err)
		}
		s.conserved(t, "phone", 2)
		want := []string{"order.created alice 9.99 CNY", "order.created bob 9.99 CNY", "order.paid alice 9.99 CNY",
			"order.expired bob 9.99 CNY", "order.created carol 9.99 CNY", "payment.refund_required bob 9.99 CNY"}
		got := s.published()
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Fatalf("events %q, want %q among them", got, w)
			}
		}
		if n := len(s.published(orders.Paid, orders.Expired)); n != 2 {
			t.Fatalf("%d paid/expired events, want 2: %q", n, got)
		}
		// A second late payment of the same order is another refund: its
		// event has a key of its own, so no subscriber drops it as a repeat.
		if late := s.pay(t, payBody("evt_b5", seckill.OrderID(bob.ID), "succeeded", "9.99", "CNY")); !late.RefundRequired {
			t.Fatalf("second late payment: %+v, want a refund required", late)
		}
		s.run(t, "phone")
		keys := map[string]bool{}
		s.mu.Lock()
		for _, e := range s.events {
			if e.Type == orders.RefundRequired {
				keys[e.Key()] = true
			}
		}
		s.mu.Unlock()
		if !keys[seckill.OrderID(bob.ID)+":payment.refund_required:evt_b4"] || !keys[seckill.OrderID(bob.ID)+":payment.refund_required:evt_b5"] {
			t.Fatalf("refund event keys %v, want one for each of evt_b4 and evt_b5", keys)
		}
		// Nothing can be preheated away while carol's order awaits payment.
		if _, err := s.svc.Preheat(ctx, seckill.Sale{ItemID: "phone", Stock: 1, EndsAt: t0.Add(24 * time.Hour)}); !errors.Is(err, seckill.ErrOrdersPending) {
			t.Fatalf("preheat with an order awaiting payment: %v, want ErrOrdersPending", err)
		}
	})
}

// TestNoWindowOrdersConfirmWithEvents: without a payment window an order is
// confirmed as before (with its price's amount, if any), and its
// order.created event goes out.
func TestNoWindowOrdersConfirmWithEvents(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		s := newPaySale(t, b)
		s.preheat(t, "plain", 1, terms{})
		s.preheat(t, "priced", 1, terms{price: "100", currency: "JPY"})
		for _, item := range []string{"plain", "priced"} {
			if _, err := s.svc.Purchase(context.Background(), item, "alice", 1); err != nil {
				t.Fatal(err)
			}
			s.run(t, item)
			p := s.mine(t, item, "alice")
			if p.Status != seckill.Confirmed || !p.PayBy.IsZero() {
				t.Fatalf("%s: %+v, want confirmed without a pay-by time", item, p)
			}
		}
		if p := s.mine(t, "priced", "alice"); p.Amount != "100" || p.Currency != "JPY" {
			t.Fatalf("priced: amount %q %q, want 100 JPY", p.Amount, p.Currency)
		}
		if got := s.published(); !slices.Equal(got, []string{"order.created alice  ", "order.created alice 100 JPY"}) {
			t.Fatalf("events %q", got)
		}
		if _, err := httpapi.ApplyPayment(context.Background(), s.proc, payBody("e1", seckill.OrderID(s.mine(t, "priced", "alice").ID), "succeeded", "100", "JPY")); !errors.Is(err, seckill.ErrNoOrder) {
			t.Fatalf("payment of an order without a window: %v, want ErrNoOrder", err)
		}
	})
}

// TestPreheatPaymentRules: a price and a payment window breaking a rule are
// refused, whoever preheats (the API parses into the same Sale; its JSON
// cases are in httpapi's TestParsePreheat), and nothing is stored.
func TestPreheatPaymentRules(t *testing.T) {
	rdb := newEnv(t, redistest.Backends(t)[0].Client, seckill.Config{})
	for _, tc := range []struct {
		terms  terms
		fields []string
	}{
		{terms{price: "9.99"}, []string{"currency"}},
		{terms{currency: "CNY"}, []string{"price"}},
		{terms{price: "9.999", currency: "CNY"}, []string{"price"}},
		{terms{price: "9.990", currency: "CNY"}, []string{"price"}}, // three places, as written
		{terms{price: "1.5", currency: "JPY"}, []string{"price"}},
		{terms{price: "0", currency: "CNY"}, []string{"price"}},
		{terms{price: "-1", currency: "CNY"}, []string{"price"}},
		{terms{price: "1000001", currency: "JPY"}, []string{"price"}},
		{terms{price: "1", currency: "XXX"}, []string{"currency"}},
		{terms{window: 30 * time.Second}, []string{"payment_window_seconds"}},
		{terms{price: "1", currency: "CNY", window: -time.Second}, []string{"payment_window_seconds"}},
		{terms{price: "1", currency: "CNY", window: 86401 * time.Second}, []string{"payment_window_seconds"}},
		{terms{price: "1", currency: "CNY", window: 1500 * time.Millisecond}, []string{"payment_window_seconds"}},
	} {
		sale := tc.terms.of(seckill.Sale{ItemID: "rules", Stock: 1, EndsAt: t0.Add(24 * time.Hour)})
		_, err := rdb.svc.Preheat(context.Background(), sale)
		var verr *validation.Error
		if !errors.As(err, &verr) {
			t.Fatalf("%+v: %v, want a validation error", tc.terms, err)
		}
		var got []string
		for _, f := range verr.Errors {
			got = append(got, f.Field)
		}
		if !slices.Equal(got, tc.fields) {
			t.Errorf("%+v: fields %q, want %q", tc.terms, got, tc.fields)
		}
		if n, _ := rdb.store.Shards(context.Background(), "rules"); n != 0 {
			t.Fatalf("%+v: a refused preheat stored the item", tc.terms)
		}
	}
	for _, ok := range []terms{{"1", "CNY", 24 * time.Hour}, {"1000000", "JPY", time.Second}, {"9.90", "CNY", 0}} {
		sale := ok.of(seckill.Sale{ItemID: "ok", Stock: 1, EndsAt: t0.Add(24 * time.Hour)})
		if _, err := rdb.svc.Preheat(context.Background(), sale); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// TestPaymentRacesExpiry: a payment that arrived before the pay-by time
// (by the webhook's clock) and the expiry job (by the consumer's clock, at
// the pay-by time) run at once, many times: each order ends one way only,
// paid and not expired (its stock kept), or expired (its stock back, the
// buyer's limit restored) with the payment answered refund_required, and
// the ledger, the purchase and the answer agree.
func TestPaymentRacesExpiry(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		ends := map[seckill.PurchaseStatus]int{}
		rounds := 100
		if b.name == "dynamodb" {
			rounds = 40
		}
		for round := range rounds {
			item := "race-" + strconv.Itoa(round)
			s.clk.Set(t0)
			s.preheat(t, item, 1, terms{"5.00", "EUR", time.Minute})
			p, err := s.svc.Purchase(ctx, item, "alice", 1)
			if err != nil {
				t.Fatal(err)
			}
			s.run(t, item)
			payBy := s.mine(t, item, "alice").PayBy
			payer := s.processor(clock.NewFake(payBy.Add(-time.Millisecond)))
			s.clk.Set(payBy)
			expiry := "ex|" + seckill.OrderJobID(s.mine(t, item, "alice"))
			start := make(chan struct{})
			var wg sync.WaitGroup
			var ans seckill.PaymentAnswer
			var payErr, expErr error
			wg.Go(func() {
				<-start
				ans, payErr = httpapi.ApplyPayment(ctx, payer, payBody("evt-"+item, seckill.OrderID(p.ID), "succeeded", "5", "EUR"))
			})
			wg.Go(func() {
				<-start
				expErr = s.proc.Process(ctx, item, 0, expiry)
			})
			close(start)
			wg.Wait()
			if payErr != nil || expErr != nil {
				t.Fatalf("round %d: pay %v, expire %v", round, payErr, expErr)
			}
			// Both answered: Redis follows the ledger already, whichever
			// call decided.
			got := s.mine(t, item, "alice")
			if string(got.Status) != string(ans.Status) {
				t.Fatalf("round %d: purchase %s, payment answered %s", round, got.Status, ans.Status)
			}
			s.run(t, item) // the events
			got = s.mine(t, item, "alice")
			st := s.stats(t, item)
			switch got.Status {
			case seckill.Paid:
				if ans.Status != seckill.Paid || ans.RefundRequired || st.Paid != 1 || st.Expired != 0 || st.StockLeft != 0 {
					t.Fatalf("round %d: paid, yet answer %+v, stats %+v", round, ans, st)
				}
			case seckill.Expired:
				if ans.Status != seckill.Expired || !ans.RefundRequired || st.Paid != 0 || st.Expired != 1 || st.StockLeft != 1 {
					t.Fatalf("round %d: expired, yet answer %+v, stats %+v", round, ans, st)
				}
				if _, err := s.svc.Purchase(ctx, item, "alice", 1); err != nil {
					t.Fatalf("round %d: alice's limit not restored: %v", round, err)
				}
			default:
				t.Fatalf("round %d: alice's purchase is %s", round, got.Status)
			}
			o, err := b.ledger().FindOrder(ctx, seckill.Order{ID: seckill.OrderID(p.ID)})
			if err != nil || string(o.End) != string(got.Status) {
				t.Fatalf("round %d: ledger %+v %v, purchase %s", round, o, err, got.Status)
			}
			ends[got.Status]++
		}
		t.Logf("%d rounds: %v", rounds, ends)
	})
}

// TestExpiryRedeliveredAfterACrash: the ledger expired the order but the
// process died before Redis followed (the expiry job's lease ran out); the
// job delivered again finishes it, once.
func TestExpiryRedeliveredAfterACrash(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		s.preheat(t, "crash", 1, terms{"1", "USD", 5 * time.Second})
		p, err := s.svc.Purchase(ctx, "crash", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		s.run(t, "crash")
		s.clk.Advance(5 * time.Second)
		if _, err := b.ledger().ExpireOrder(ctx, seckill.Order{ID: seckill.OrderID(p.ID), ItemID: "crash"}, s.clk.Now()); err != nil {
			t.Fatal(err) // ...and the process dies here
		}
		expiry := "ex|" + seckill.OrderJobID(s.mine(t, "crash", "alice"))
		for range 2 {
			if err := s.proc.Process(ctx, "crash", 0, expiry); err != nil {
				t.Fatal(err)
			}
		}
		if st := s.stats(t, "crash"); st.Expired != 1 || st.StockLeft != 1 {
			t.Fatalf("stats %+v, want one unit expired back", st)
		}
		if _, err := s.svc.Purchase(ctx, "crash", "alice", 1); err != nil {
			t.Fatalf("alice again: %v (limit not restored)", err)
		}
		s.run(t, "crash")
		if n := len(s.published(orders.Expired)); n != 1 {
			t.Fatalf("%d order.expired events, want 1", n)
		}
	})
}

// TestEventsSurviveAPreheat: order events still queued when the item is
// preheated again go out all the same.
func TestEventsSurviveAPreheat(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		s.preheat(t, "again", 1, terms{})
		if _, err := s.svc.Purchase(ctx, "again", "alice", 1); err != nil {
			t.Fatal(err)
		}
		q, _ := s.store.Queue("again", 1)
		for _, j := range handOver(t, q, s.clk.Now()) { // the order job only
			if err := s.proc.Process(ctx, "again", j.Shard, j.ID); err != nil {
				t.Fatal(err)
			}
		}
		s.clk.Advance(time.Second)
		s.preheat(t, "again", 1, terms{})
		s.run(t, "again")
		if got := s.published(orders.Created); len(got) != 1 {
			t.Fatalf("events %q, want alice's order.created", got)
		}
		if st, err := q.Stats(ctx, s.clk.Now()); err != nil || st != (delayq.Stats{}) {
			t.Fatalf("queue %+v %v", st, err)
		}
	})
}

// TestPaidBeforeRedisKnewOfTheOrder: the order was written to the ledger,
// then the consumer died before Redis recorded it; the buyer paid in that
// gap. The order job, delivered again, finds the order paid and ends the
// purchase paid at once (not at its pay-by time), with no expiry left.
func TestPaidBeforeRedisKnewOfTheOrder(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		s.preheat(t, "gap", 1, terms{"3", "USD", 10 * time.Minute})
		p, err := s.svc.Purchase(ctx, "gap", "alice", 1)
		if err != nil {
			t.Fatal(err)
		}
		o := seckill.Order{ID: seckill.OrderID(p.ID), PurchaseID: p.ID, ItemID: "gap", UserID: "alice", Quantity: 1,
			CreatedAt: s.clk.Now(), Amount: "3.00", Currency: "USD", PayBy: s.clk.Now().Add(10 * time.Minute)}
		if err := b.ledger().CreateOrder(ctx, o); err != nil {
			t.Fatal(err) // ...and the consumer dies here
		}
		if ans := s.pay(t, payBody("gap-1", o.ID, "succeeded", "3", "USD")); ans.Status != seckill.Paid {
			t.Fatalf("payment: %+v", ans)
		}
		s.run(t, "gap")
		if got := s.mine(t, "gap", "alice"); got.Status != seckill.Paid {
			t.Fatalf("after the order job: %s, want paid", got.Status)
		}
		q, _ := s.store.Queue("gap", 1)
		if st, err := q.Stats(ctx, s.clk.Now()); err != nil || st != (delayq.Stats{}) {
			t.Fatalf("queue %+v %v, want no expiry left", st, err)
		}
		if st := s.stats(t, "gap"); st.Paid != 1 || st.AwaitingPayment != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// unreachableExpiries is an order ledger whose ExpireOrder fails (DynamoDB
// unreachable) while down is set.
type unreachableExpiries struct {
	seckill.OrderLedger
	down *atomic.Bool
}

func (l unreachableExpiries) ExpireOrder(ctx context.Context, o seckill.Order, now time.Time) (seckill.OrderEnd, error) {
	if l.down.Load() {
		return seckill.EndNone, errors.New("ledger unreachable")
	}
	return l.OrderLedger.ExpireOrder(ctx, o, now)
}

// An expiry that fails is counted in OrderExpiryFailures (what the alarm of
// that name watches), and the job is delivered again: once the ledger is
// back, the order expires and nothing more is counted.
func TestFailedExpiryIsCounted(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newPaySale(t, b)
		var down atomic.Bool
		var out bytes.Buffer
		s.proc = seckill.NewOrderProcessor(s.store, unreachableExpiries{b.ledger(), &down}, s.clk, quiet)
		s.proc.Publisher = orders.PublisherFunc(func(context.Context, orders.Event) error { return nil })
		s.proc.Metrics = metrics.New(&out, s.clk)
		s.preheat(t, "fail", 1, terms{"1", "USD", 5 * time.Second})
		if _, err := s.svc.Purchase(ctx, "fail", "alice", 1); err != nil {
			t.Fatal(err)
		}
		s.run(t, "fail")
		if strings.Contains(out.String(), metrics.OrderExpiryFailures) {
			t.Fatalf("counted a failure before any expiry: %s", out.String())
		}
		s.clk.Advance(5 * time.Second)
		q, err := s.store.Queue("fail", 1)
		if err != nil {
			t.Fatal(err)
		}
		down.Store(true)
		jobs := handOver(t, q, s.clk.Now())
		var failed int
		for _, j := range jobs {
			if err := s.proc.Process(ctx, "fail", j.Shard, j.ID); err != nil {
				failed++
			}
		}
		if failed != 1 || strings.Count(out.String(), `"`+metrics.OrderExpiryFailures+`"`) != 2 { // its name in the line and in the directive
			t.Fatalf("%d of %d jobs failed; metric lines:\n%s\nwant the one expiry failed and counted once", failed, len(jobs), out.String())
		}
		down.Store(false)
		out.Reset()
		for _, j := range jobs {
			if err := s.proc.Process(ctx, "fail", j.Shard, j.ID); err != nil {
				t.Fatalf("redelivered %s: %v", j.ID, err)
			}
		}
		if got := s.mine(t, "fail", "alice").Status; got != seckill.Expired {
			t.Fatalf("after the redelivery the purchase is %s, want expired", got)
		}
		if strings.Contains(out.String(), metrics.OrderExpiryFailures) {
			t.Fatalf("a successful expiry was counted as failed: %s", out.String())
		}
	})
}
