package withdrawal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// provider answers Pay from a script of errors (nil = paid) and counts calls
// per withdrawal id, as a real idempotent provider would see them.
type provider struct {
	mu     sync.Mutex
	script []error
	calls  map[string]int
	block  chan struct{} // if set, Pay waits on it
	// lookups answer Lookup in turn; looked counts the lookups.
	lookups []withdrawal.Lookup
	looked  int
}

func (p *provider) Pay(ctx context.Context, w withdrawal.Withdrawal) (string, error) {
	if p.block != nil {
		<-p.block
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[w.ID]++
	if len(p.script) > 0 {
		err := p.script[0]
		p.script = p.script[1:]
		if err != nil {
			return "", err
		}
	}
	return "po_" + w.ID, nil
}

// Lookup answers from lookups, one per call; with none left, the provider
// has no lookup.
func (p *provider) Lookup(ctx context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.looked++
	if len(p.lookups) == 0 {
		return withdrawal.Lookup{}, withdrawal.ErrNoLookup
	}
	lk := p.lookups[0]
	p.lookups = p.lookups[1:]
	return lk, nil
}

func (p *provider) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

type notifier struct {
	mu   sync.Mutex
	got  []withdrawal.Processed
	fail int // fail this many calls first
}

func (n *notifier) Notify(ctx context.Context, m withdrawal.Processed) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fail > 0 {
		n.fail--
		return errors.New("finance endpoint down")
	}
	n.got = append(n.got, m)
	return nil
}

func (n *notifier) messages() []withdrawal.Processed {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]withdrawal.Processed(nil), n.got...)
}

var (
	errServer  = errors.New("provider answered 500")
	errRefused = fmt.Errorf("%w: provider answered 400: bad destination", withdrawal.ErrPermanent)
)

type payoutEnv struct {
	env
	prov *provider
	fin  *notifier
	proc *withdrawal.Processor
}

func newPayoutEnv(t *testing.T, b redistest.Backend, script ...error) payoutEnv {
	t.Helper()
	e := newEnv(t, b, clock.NewFake(t0))
	pe := payoutEnv{env: e, prov: &provider{script: script}, fin: &notifier{}}
	var err error
	pe.proc, err = withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: e.ledger, Provider: pe.prov, Notifier: pe.fin, Clock: e.clock,
		MaxAttempts: 3, RetryBase: 30 * time.Second, RetryCap: time.Hour, AttemptTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pe
}

// create makes a withdrawal due now and returns its Ref.
func (e payoutEnv) create(t *testing.T, user string) withdrawal.Ref {
	t.Helper()
	c, err := httpapi.CreateWithdrawal(context.Background(), e.svc, user, "k-"+user,
		[]byte(`{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":0}`))
	if err != nil {
		t.Fatal(err)
	}
	return withdrawal.Ref{Shard: e.queue.ShardFor(user), ID: c.ID}
}

func (e payoutEnv) get(t *testing.T, user string, ref withdrawal.Ref) withdrawal.Withdrawal {
	t.Helper()
	w, err := e.svc.Get(context.Background(), user, ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestPaidOnFirstAttempt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newPayoutEnv(t, b)
		ref := e.create(t, "alice")
		if err := e.proc.Process(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
		w := e.get(t, "alice", ref)
		if w.Status != withdrawal.Paid || w.Attempts != 1 || w.PayoutID != "po_"+ref.ID || w.Untold() {
			t.Fatalf("after payout: %+v", w)
		}
		msgs := e.fin.messages()
		if len(msgs) != 1 || msgs[0].WithdrawalID != ref.ID || msgs[0].Status != withdrawal.Paid ||
			msgs[0].Amount != "10.00" || msgs[0].Attempts != 1 || msgs[0].Type != "payout.processed" {
			t.Fatalf("finance got %+v", msgs)
		}
	})
}

func TestTransientFailuresRetryWithBackoffThenPay(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b, errServer, errServer, nil)
		ref := e.create(t, "alice")
		for attempt := 1; attempt <= 2; attempt++ {
			if err := e.proc.Process(ctx, ref); err != nil {
				t.Fatal(err)
			}
			w := e.get(t, "alice", ref)
			if w.Status != withdrawal.Retrying || w.Attempts != attempt || w.LastError != errServer.Error() {
				t.Fatalf("after failure %d: %+v", attempt, w)
			}
			wait := w.DueAt.Sub(e.clock.Now())
			base := 30 * time.Second << (attempt - 1)
			if wait < base/2 || wait > base {
				t.Fatalf("retry %d in %s, want within %s..%s", attempt, wait, base/2, base)
			}
			// A duplicate delivery before the retry is due changes nothing.
			if err := e.proc.Process(ctx, ref); err != nil {
				t.Fatal(err)
			}
			if got := e.prov.count(ref.ID); got != attempt {
				t.Fatalf("provider called %d times, want %d", got, attempt)
			}
			next, ok, err := e.queue.NextDue(ctx, ref.Shard)
			if err != nil || !ok || !next.Equal(w.DueAt) {
				t.Fatalf("retry not scheduled at %v: %v %v %v", w.DueAt, next, ok, err)
			}
			e.clock.Set(w.DueAt)
		}
		if err := e.proc.Process(ctx, ref); err != nil {
			t.Fatal(err)
		}
		w := e.get(t, "alice", ref)
		if w.Status != withdrawal.Paid || w.Attempts != 3 || w.Untold() {
			t.Fatalf("after the third attempt: %+v", w)
		}
		if n := len(e.fin.messages()); n != 1 {
			t.Fatalf("finance got %d messages", n)
		}
	})
}

func TestPermanentFailureFailsAtOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		e := newPayoutEnv(t, b, errRefused)
		ref := e.create(t, "alice")
		if err := e.proc.Process(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
		w := e.get(t, "alice", ref)
		if w.Status != withdrawal.Failed || w.Attempts != 1 || w.LastError != errRefused.Error() || w.Untold() {
			t.Fatalf("after a permanent refusal: %+v", w)
		}
		msgs := e.fin.messages()
		if len(msgs) != 1 || msgs[0].Status != withdrawal.Failed {
			t.Fatalf("finance got %+v", msgs)
		}
	})
}

func TestMaxAttemptsFails(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b, errServer, errServer, errServer, nil)
		ref := e.create(t, "alice")
		for range 3 {
			if err := e.proc.Process(ctx, ref); err != nil {
				t.Fatal(err)
			}
			e.clock.Set(e.get(t, "alice", ref).DueAt)
		}
		w := e.get(t, "alice", ref)
		if w.Status != withdrawal.Failed || w.Attempts != 3 || w.LastError != errServer.Error() {
			t.Fatalf("after max attempts: %+v", w)
		}
		if msgs := e.fin.messages(); len(msgs) != 1 || msgs[0].Status != withdrawal.Failed || msgs[0].Attempts != 3 {
			t.Fatalf("finance got %+v", msgs)
		}
	})
}

func TestConcurrentDuplicateDeliveriesPayOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b)
		e.prov.block = make(chan struct{})
		ref := e.create(t, "alice")
		const n = 8
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { errs <- e.proc.Process(ctx, ref) })
		}
		// One delivery holds the attempt (blocked in the provider); every
		// other one finds it under way and is done with. Only then does the
		// provider answer.
		for range n - 1 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		close(e.prov.block)
		wg.Wait()
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		// The deliveries that found the attempt under way left the job due
		// again at the attempt's deadline; when it comes, it finds the work done.
		next, ok, err := e.queue.NextDue(ctx, ref.Shard)
		if err != nil || !ok || !next.Equal(e.clock.Now().Add(time.Minute)) {
			t.Fatalf("follow-up job due %v %v %v, want at the attempt deadline", next, ok, err)
		}
		e.clock.Set(next)
		if err := e.proc.Process(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if got := e.prov.count(ref.ID); got != 1 {
			t.Fatalf("provider called %d times", got)
		}
		if w := e.get(t, "alice", ref); w.Status != withdrawal.Paid || w.Attempts != 1 {
			t.Fatalf("record %+v", w)
		}
		if n := len(e.fin.messages()); n != 1 {
			t.Fatalf("finance got %d messages, want 1", n)
		}
	})
}

func TestFinanceDownIsRetriedByRedelivery(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b)
		e.fin.fail = 2
		ref := e.create(t, "alice")
		for i := range 2 {
			if err := e.proc.Process(ctx, ref); err == nil {
				t.Fatalf("delivery %d: finance failure not reported", i)
			}
		}
		if err := e.proc.Process(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if got := e.prov.count(ref.ID); got != 1 {
			t.Fatalf("provider called %d times", got)
		}
		if w := e.get(t, "alice", ref); w.Status != withdrawal.Paid || w.Untold() {
			t.Fatalf("record %+v", w)
		}
		if n := len(e.fin.messages()); n != 1 {
			t.Fatalf("finance got %d messages, want 1", n)
		}
	})
}

func TestCancelledIsNeverPaid(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b)
		ref := e.create(t, "alice")
		if _, err := e.svc.Cancel(ctx, "alice", ref.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.proc.Process(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if got := e.prov.count(ref.ID); got != 0 {
			t.Fatalf("provider called %d times for a cancelled withdrawal", got)
		}
		if n := len(e.fin.messages()); n != 0 {
			t.Fatalf("finance told of a cancelled withdrawal")
		}
	})
}

func TestBackoffIsCappedAndJittered(t *testing.T) {
	p, err := withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: nil, Provider: &provider{}, Notifier: &notifier{}, Clock: clock.System{},
	})
	if err == nil || p != nil {
		t.Fatal("a processor without a ledger was built")
	}
	p, err = withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: newEnv(t, redistest.Backends(t)[0], clock.NewFake(t0)).ledger, Provider: &provider{},
		Notifier: &notifier{}, Clock: clock.System{},
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Duration]bool{}
	for attempt := 1; attempt <= 40; attempt++ {
		d := p.Backoff(attempt)
		want := withdrawal.DefaultRetryBase << (attempt - 1)
		if attempt > 6 { // 30 s << 6 is 32 min, past the 30 min cap
			want = withdrawal.DefaultRetryCap
		}
		if d < want/2 || d > want {
			t.Fatalf("attempt %d: backoff %s outside %s..%s", attempt, d, want/2, want)
		}
		seen[d] = true
	}
	if len(seen) < 30 {
		t.Fatalf("backoff shows little jitter: %d distinct values of 40", len(seen))
	}
}

var errNoAnswer = fmt.Errorf("%w: no answer within 10s", withdrawal.ErrOutcomeUnknown)

// TestUnansweredPayoutIsNeverFailed: a call that got no answer may have paid,
// so past MaxAttempts the withdrawal keeps being asked about (the backoff
// growing to its cap) instead of being failed, until the provider answers.
func TestUnansweredPayoutIsNeverFailed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		e := newPayoutEnv(t, b, errNoAnswer, errNoAnswer, errNoAnswer, errNoAnswer, errNoAnswer, nil)
		ref := e.create(t, "alice")
		for attempt := 1; attempt <= 5; attempt++ {
			if err := e.proc.Process(ctx, ref); err != nil {
				t.Fatal(err)
			}
			w := e.get(t, "alice", ref)
			if w.Status != withdrawal.Retrying || w.Attempts != attempt {
				t.Fatalf("after unanswered call %d (max 3): %+v", attempt, w)
			}
			base := 30 * time.Second << (attempt - 1)
			if wait := w.DueAt.Sub(e.clock.Now()); wait < base/2 || wait > base {
				t.Fatalf("asked again in %s, want the backoff %s..%s", wait, base/2, base)
			}
			if n := len(e.fin.messages()); n != 0 {
				t.Fatalf("finance told of an unresolved payout: %+v", e.fin.messages())
			}
			e.clock.Set(w.DueAt)
		}
		if err := e.proc.Process(ctx, ref); err != nil {
			t.Fatal(err)
		}
		if w := e.get(t, "alice", ref); w.Status != withdrawal.Paid || w.Attempts != 6 {
			t.Fatalf("once the provider answers: %+v", w)
		}
		if msgs := e.fin.messages(); len(msgs) != 1 || msgs[0].Status != withdrawal.Paid {
			t.Fatalf("finance got %+v", msgs)
		}
	})
}
