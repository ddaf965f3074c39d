package seckill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// errLost is what a caller gets when the ledger's answer never came.
var errLost = errors.New("test: the order ledger's answer never came")

// heldCall is one order-ledger call the test holds: it blocks until the
// test lets it go, without (late) or after (answer late) reaching the
// ledger; with lose, its caller then gets errLost instead of the answer.
type heldCall struct {
	applyFirst, lose bool
	entered, release chan struct{}
}

// slowLedger is an order ledger whose next call can be held.
type slowLedger struct {
	seckill.OrderLedger
	mu    sync.Mutex
	armed *heldCall
}

func (l *slowLedger) hold(applyFirst, lose bool) *heldCall {
	h := &heldCall{applyFirst: applyFirst, lose: lose, entered: make(chan struct{}), release: make(chan struct{})}
	l.mu.Lock()
	l.armed = h
	l.mu.Unlock()
	return h
}

func (l *slowLedger) take() *heldCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.armed
	l.armed = nil
	return h
}

// through runs call as the held call h says.
func (h *heldCall) through(call func() error) error {
	if h == nil {
		return call()
	}
	var err error
	if h.applyFirst {
		err = call()
	}
	close(h.entered)
	<-h.release
	if !h.applyFirst {
		err = call()
	}
	if h.lose {
		return errLost
	}
	return err
}

func (l *slowLedger) CreateOrder(ctx context.Context, o seckill.Order) error {
	return l.take().through(func() error { return l.OrderLedger.CreateOrder(ctx, o) })
}

func (l *slowLedger) VoidOrder(ctx context.Context, o seckill.Order) (bool, error) {
	var ordered bool
	err := l.take().through(func() error {
		var err error
		ordered, err = l.OrderLedger.VoidOrder(ctx, o)
		return err
	})
	return ordered, err
}

// handOver is the AWS poller: it claims every due order job of item and
// acks each at once, as SQS now holds it; it returns the jobs sent.
func handOver(t *testing.T, q *delayq.Queue, now time.Time) []delayq.Job {
	t.Helper()
	var sent []delayq.Job
	for n := range q.Shards() {
		c, err := q.Claim(context.Background(), n, now, time.Minute, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range c.Jobs {
			if _, err := q.Ack(context.Background(), n, c.Lease, j.ID); err != nil {
				t.Fatal(err)
			}
		}
		sent = append(sent, c.Jobs...)
	}
	return sent
}

// TestSlowOrderWriteIsNeverSoldTwice is issue 13's "flash sale sold twice":
// stock 1; the AWS poller acks the order job once SQS holds it; the order
// write of the one purchase is slow, or its answer is late or lost, for
// longer than the compensation timeout and every re-enqueue. Whatever the
// compensation pass decides, the unit is never sold twice, the purchase ends
// confirmed (with its order) or released (with none), and the stock adds up.
func TestSlowOrderWriteIsNeverSoldTwice(t *testing.T) {
	cases := []struct {
		name             string
		applyFirst, lose bool
	}{
		{"write lands late", false, false},
		{"write landed, answer late", true, false},
		{"write landed, answer lost", true, true},
		{"write late, answer lost", false, true},
	}
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		for i, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				soldOnce(t, b, fmt.Sprintf("phone-%d", i), tc.applyFirst, tc.lose)
			})
		}
	})
}

func soldOnce(t *testing.T, b orderBackend, item string, applyFirst, lose bool) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	store := seckill.NewStore(b.rdb, "hg:")
	svc, err := seckill.NewService(seckill.Config{Store: store, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowLedger{OrderLedger: b.ledger()}
	proc := seckill.NewOrderProcessor(store, slow, clk, quiet)
	comp := &seckill.Compensation{Store: store, Orders: slow, Clock: clk, Log: quiet}
	if _, err := svc.Preheat(ctx, seckill.Sale{ItemID: item, Stock: 1, EndsAt: t0.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	alice, err := svc.Purchase(ctx, item, "alice", 1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := store.Queue(item, 1)
	if err != nil {
		t.Fatal(err)
	}
	sqs := handOver(t, q, clk.Now())
	if len(sqs) != 1 {
		t.Fatalf("handed over %v", sqs)
	}

	// The first delivery's order write is held for minutes.
	held := slow.hold(applyFirst, lose)
	first := make(chan error, 1)
	go func() { first <- proc.Process(ctx, item, sqs[0].Shard, sqs[0].ID) }()
	<-held.entered
	released := false
	defer func() {
		if !released {
			close(held.release)
			if err := <-first; err != nil { // the test failed already; this waits it out
				t.Logf("the held delivery: %v", err)
			}
		}
	}()

	// Meanwhile the compensation pass runs, past the timeout and every
	// re-enqueue; whatever it enqueues again goes to SQS too, and waits there.
	clk.Advance(seckill.DefaultReservedTimeout + time.Second)
	for range seckill.DefaultMaxRequeues + 1 {
		if _, err := comp.Run(ctx, clk.Now()); err != nil {
			t.Fatal(err)
		}
		sqs = append(sqs, handOver(t, q, clk.Now())...)
		clk.Advance(time.Minute)
	}
	// Bob tries for the unit; if he gets it, his order is made.
	if bob, err := svc.Purchase(ctx, item, "bob", 1); err == nil {
		for _, j := range handOver(t, q, clk.Now()) {
			if j.ID != seckill.OrderJobID(bob) {
				sqs = append(sqs, j)
				continue
			}
			if err := proc.Process(ctx, item, j.Shard, j.ID); err != nil {
				t.Fatalf("bob's order: %v", err)
			}
		}
	} else if !errors.Is(err, seckill.ErrSoldOut) {
		t.Fatalf("bob: %v", err)
	}
	// Now the held write lands (or its answer arrives), and SQS delivers
	// every message it holds, some of them twice.
	released = true
	close(held.release)
	if err := <-first; err != nil && !errors.Is(err, errLost) {
		t.Logf("the held delivery failed: %v", err)
	}
	for range 2 {
		for _, j := range sqs {
			if err := proc.Process(ctx, item, j.Shard, j.ID); err != nil {
				t.Fatalf("redelivery of %s: %v", j.ID, err)
			}
		}
	}
	// A last pass, long after, finds nothing left to do.
	clk.Advance(time.Hour)
	for range seckill.DefaultMaxRequeues + 1 {
		if _, err := comp.Run(ctx, clk.Now()); err != nil {
			t.Fatal(err)
		}
		for _, j := range handOver(t, q, clk.Now()) {
			if err := proc.Process(ctx, item, j.Shard, j.ID); err != nil {
				t.Fatal(err)
			}
		}
	}

	entries, err := b.entries(ctx, item, 1)
	if err != nil {
		t.Fatal(err)
	}
	orders := map[string]ledgerEntry{}
	for id, e := range entries {
		if !e.voided {
			orders[id] = e
		}
	}
	if len(orders) > 1 {
		t.Errorf("stock 1 sold twice: orders %+v", orders)
	}
	purchases, err := store.Purchases(ctx, item, 1)
	if err != nil {
		t.Fatal(err)
	}
	var reserved, confirmed int64
	for _, p := range purchases {
		_, ordered := orders[seckill.OrderID(p.ID)]
		switch p.Status {
		case seckill.Confirmed:
			confirmed += int64(p.Quantity)
			if !ordered || p.OrderID != seckill.OrderID(p.ID) {
				t.Errorf("%s's purchase is confirmed as %q without its order in the ledger", p.UserID, p.OrderID)
			}
		case seckill.Released:
			if ordered {
				t.Errorf("%s's purchase was released, yet its order exists: %+v", p.UserID, orders[seckill.OrderID(p.ID)])
			}
		default:
			reserved += int64(p.Quantity)
			t.Errorf("%s's purchase is still %s", p.UserID, p.Status)
		}
	}
	for id, o := range orders {
		found := false
		for _, p := range purchases {
			found = found || seckill.OrderID(p.ID) == id
		}
		if !found {
			t.Errorf("order %s (%+v) belongs to no purchase", id, o)
		}
	}
	if len(purchases) == 0 || purchases[0].ID != alice.ID {
		t.Errorf("alice's purchase is gone: %+v", purchases)
	}
	st, err := store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st[item]; got.StockLeft+reserved+confirmed != 1 || got.Confirmed != confirmed {
		t.Errorf("stock not conserved: %+v, reserved %d, confirmed %d (from the purchases), initial 1", got, reserved, confirmed)
	}
}
