package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// The cases of issue 21, defect 1 ("paid, then cancelled"): an attempt
// whose request reaches the provider after the attempt was taken over. They
// run the real payout step (withdrawal.Processor) over the backend, with a
// provider whose bank a test controls, on a fake clock.

// attemptTimeout is the deadline of an attempt in these cases.
const attemptTimeout = 25 * time.Second

// bank is the provider's side: what it received and paid, per idempotency
// key, and what its lookup shows.
type bank struct {
	mu       sync.Mutex
	received map[string]string // withdrawal id -> payout id
	payouts  int
}

func (k *bank) receive(id string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.received == nil {
		k.received = map[string]string{}
	}
	if po, ok := k.received[id]; ok {
		return po // an idempotent provider: the same key pays once
	}
	k.payouts++
	po := fmt.Sprintf("po_%d", k.payouts)
	k.received[id] = po
	return po
}

func (k *bank) lookup(id string) withdrawal.Lookup {
	k.mu.Lock()
	defer k.mu.Unlock()
	if po, ok := k.received[id]; ok {
		return withdrawal.Lookup{State: withdrawal.LookupPaid, PayoutID: po}
	}
	return withdrawal.Lookup{State: withdrawal.LookupNotFound}
}

// teller is a consumer's view of the provider. Pay checks that the call
// carries its attempt's deadline and is made before it; then, if late is
// set, it reports on sent and waits for arrive before the request reaches
// the bank (a request that leaves on time and arrives late); with answer
// set, the bank never sees the request and the call gets that error.
type teller struct {
	bank   *bank
	clock  clock.Clock
	late   bool
	sent   chan struct{}
	arrive chan struct{}
	answer error
	// badCall is the first call made without its attempt's deadline or
	// past it.
	mu      sync.Mutex
	badCall string
}

func (c *teller) check(ctx context.Context, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	deadline, ok := withdrawal.CallDeadline(ctx)
	switch {
	case c.badCall != "":
	case !ok:
		c.badCall = what + " without its attempt's deadline"
	case !c.clock.Now().Before(deadline):
		c.badCall = fmt.Sprintf("%s at %s, past its attempt's deadline %s", what, c.clock.Now(), deadline)
	}
}

func (c *teller) Pay(ctx context.Context, w withdrawal.Withdrawal) (string, error) {
	c.check(ctx, "pay")
	if c.late {
		close(c.sent)
		<-c.arrive
	}
	if c.answer != nil {
		return "", c.answer
	}
	return c.bank.receive(w.ID), nil
}

func (c *teller) Lookup(ctx context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	c.check(ctx, "lookup")
	return c.bank.lookup(w.ID), nil
}

// finance collects what finance is told.
type finance struct {
	mu  sync.Mutex
	got []withdrawal.Processed
}

func (f *finance) Notify(_ context.Context, m withdrawal.Processed) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, m)
	return nil
}

func (f *finance) told() []withdrawal.Processed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]withdrawal.Processed(nil), f.got...)
}

func processor(t *testing.T, b Backend, p withdrawal.Provider, f *finance, clk clock.Clock) *withdrawal.Processor {
	t.Helper()
	proc, err := withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: b.Ledger, Provider: p, Notifier: f, Clock: clk,
		MaxAttempts: 5, RetryBase: 30 * time.Second, RetryCap: time.Hour, AttemptTimeout: attemptTimeout,
		Jitter: func(time.Duration) time.Duration { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

var err503 = errors.New("provider answered 503 Service Unavailable")

// testPaidLate is defect 1 as found: consumer A's request leaves on time
// and arrives late; B takes the attempt over, the lookup truthfully says
// 404 (A's request is on its way), B's own call gets a 503. The 404 proves
// nothing yet, so the record keeps "may have paid" (no cancel); A's 2xx is
// then recorded although A's attempt was taken over, and finance is told.
func testPaidLate(t *testing.T, b Backend) {
	ctx := context.Background()
	clk := clock.NewFake(T0)
	k := &bank{}
	fin := &finance{}
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)

	a := &teller{bank: k, clock: clk, late: true, sent: make(chan struct{}), arrive: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- processor(t, b, a, fin, clk).Process(ctx, w.Ref()) }()
	<-a.sent // A's request has left; it has not reached the provider

	clk.Advance(attemptTimeout + time.Second)
	bt := &teller{bank: k, clock: clk, answer: err503}
	if err := processor(t, b, bt, fin, clk).Process(ctx, w.Ref()); err != nil {
		t.Fatalf("B's attempt: %v", err)
	}
	got, err := b.Ledger.Find(ctx, w.ID)
	if err != nil || got.Status != withdrawal.Retrying || !got.MaybePaid || got.Shown() != withdrawal.Processing {
		t.Fatalf("after B's 503, a request of A's may still arrive: want retrying, may have paid; got %+v %v", got, err)
	}
	if _, err := b.Ledger.Cancel(ctx, "alice", w.ID, clk.Now()); !errors.Is(err, withdrawal.ErrNotCancellable) {
		t.Fatalf("cancel while A's request may arrive: %v", err)
	}

	close(a.arrive) // the provider pays A's request and answers A 2xx
	if err := <-done; err != nil {
		t.Fatalf("A's attempt: %v", err)
	}
	got, err = b.Ledger.Find(ctx, w.ID)
	if err != nil || got.Status != withdrawal.Paid || got.PayoutID != "po_1" || got.MaybePaid {
		t.Fatalf("A's 2xx after its attempt was taken over must be recorded: %+v %v", got, err)
	}
	if _, err := b.Ledger.Cancel(ctx, "alice", w.ID, clk.Now()); !errors.Is(err, withdrawal.ErrNotCancellable) {
		t.Fatalf("cancel of a paid withdrawal: %v", err)
	}
	if told := fin.told(); len(told) != 1 || told[0].Status != withdrawal.Paid || told[0].PayoutID != "po_1" {
		t.Fatalf("finance told %+v, want paid po_1 once", told)
	}
	for _, c := range []*teller{a, bt} {
		if c.badCall != "" {
			t.Errorf("a provider call: %s", c.badCall)
		}
	}
	// A later delivery finds it paid and told: nothing more is sent.
	if err := processor(t, b, bt, fin, clk).Process(ctx, w.Ref()); err != nil || k.payouts != 1 || len(fin.told()) != 1 {
		t.Fatalf("a later delivery: %v, %d payouts, finance told %d times", err, k.payouts, len(fin.told()))
	}
}

// testNeverReceivedNeedsItsTolerance: a lookup's 404 proves "never
// received" only once the last send's deadline plus the provider's
// signature tolerance (and its lookup's lag) have passed; before then the
// request is sent again under the same key and the record keeps "may have
// paid"; after, the record forgets it.
func testNeverReceivedNeedsItsTolerance(t *testing.T, b Backend) {
	ctx := context.Background()
	clk := clock.NewFake(T0)
	k := &bank{}
	fin := &finance{}
	w := NewWithdrawal(b.Queue, "alice", T0)
	Create(t, b.Ledger, w)

	// A's call gets no answer: it may have paid.
	unknown := &teller{bank: k, clock: clk, answer: fmt.Errorf("%w: no answer within 10s", withdrawal.ErrOutcomeUnknown)}
	if err := processor(t, b, unknown, fin, clk).Process(ctx, w.Ref()); err != nil {
		t.Fatal(err)
	}
	got, err := b.Ledger.Find(ctx, w.ID)
	if err != nil || !got.MaybePaid || !got.SentUntil.Equal(T0.Add(attemptTimeout)) {
		t.Fatalf("after no answer: %+v %v (sent until %s)", got, err, got.SentUntil)
	}

	// At its retry, within the tolerance: the 404 proves nothing yet.
	clk.Set(got.DueAt)
	busy := &teller{bank: k, clock: clk, answer: err503}
	if err := processor(t, b, busy, fin, clk).Process(ctx, w.Ref()); err != nil {
		t.Fatal(err)
	}
	got, err = b.Ledger.Find(ctx, w.ID)
	if err != nil || !got.MaybePaid || got.Attempts != 2 || got.Cancellable() {
		t.Fatalf("a 404 %s after the last send's deadline proved never received: %+v %v",
			clk.Now().Sub(T0.Add(attemptTimeout)), got, err)
	}
	lastSend := got.SentUntil
	if !lastSend.After(T0.Add(attemptTimeout)) {
		t.Fatalf("the second send did not move sent_until: %s", lastSend)
	}

	// Past the tolerance since the last send: the 404 is proof, the record
	// forgets that it may have paid, and the 503 of the call it sent is a
	// plain retry the user may cancel.
	clk.Set(lastSend.Add(withdrawal.DefaultNeverReceivedAfter + time.Second))
	if err := processor(t, b, busy, fin, clk).Process(ctx, w.Ref()); err != nil {
		t.Fatal(err)
	}
	got, err = b.Ledger.Find(ctx, w.ID)
	if err != nil || got.MaybePaid || got.Status != withdrawal.Retrying || got.Attempts != 3 || !got.Cancellable() {
		t.Fatalf("a 404 past the tolerance: %+v %v", got, err)
	}
	for _, c := range []*teller{unknown, busy} {
		if c.badCall != "" {
			t.Errorf("a provider call: %s", c.badCall)
		}
	}
}
