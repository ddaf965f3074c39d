package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// payTimes is a provider that pays at once and remembers when it paid each
// withdrawal, and how often.
type payTimes struct {
	mu   sync.Mutex
	at   map[string]time.Time
	pays map[string]int
}

func (p *payTimes) Pay(_ context.Context, w withdrawal.Withdrawal) (string, error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.at[w.ID]; !ok {
		p.at[w.ID] = now
	}
	p.pays[w.ID]++
	return "po_" + w.ID, nil
}

func (p *payTimes) Lookup(context.Context, withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	return withdrawal.Lookup{}, withdrawal.ErrNoLookup
}

type quietNotifier struct{}

func (quietNotifier) Notify(context.Context, withdrawal.Processed) error { return nil }

// answer is one reschedule's outcome as its client saw it.
type answer struct {
	id       string
	asked    time.Time // the process_at the client sent
	answered time.Time // when its answer came
	w        withdrawal.Withdrawal
	err      error
}

// TestRescheduleRacesThePayout races users rescheduling (earlier and later,
// to the millisecond) against the real claim of a poller and the real
// payout step, in real time, on both ledgers over a real redis-server:
// every withdrawal is paid exactly once, never before the due time of the
// last reschedule answered 200 (the record's), and a 409 only ever comes
// once the payout step has it.
func TestRescheduleRacesThePayout(t *testing.T) {
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	backends := []struct {
		name string
		open func(t *testing.T, q *delayq.Queue) withdrawal.Ledger
	}{
		{"redis", func(_ *testing.T, q *delayq.Queue) withdrawal.Ledger { return ledger.NewRedis(rdb, q) }},
		{"dynamodb", func(t *testing.T, q *delayq.Queue) withdrawal.Ledger {
			db := dynalitetest.Start(t)
			return ledger.NewDynamo(db.Client(), freshTables(t, db), q, ledger.DynamoOptions{Logger: slog.New(slog.DiscardHandler)})
		}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
			if err != nil {
				t.Fatal(err)
			}
			raceReschedules(t, be.open(t, q), q)
		})
	}
}

func raceReschedules(t *testing.T, led withdrawal.Ledger, q *delayq.Queue) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	svc, err := withdrawal.NewService(withdrawal.Config{Ledger: led, Clock: clock.System{}, ShardFor: q.ShardFor, Logger: quiet,
		Rules: withdrawal.Rules{Currencies: []string{"USD"}, MaxAmount: decimal.NewFromInt(1000), MaxDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	prov := &payTimes{at: map[string]time.Time{}, pays: map[string]int{}}
	proc, err := withdrawal.NewProcessor(withdrawal.ProcessorConfig{Ledger: led, Provider: prov, Notifier: quietNotifier{},
		Clock: clock.System{}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}

	// The pipeline: a poller claiming into a work queue, consumers.
	work := make(chan delayq.Job, 1024)
	var pipeline sync.WaitGroup
	pipeline.Go(func() {
		defer close(work)
		for ctx.Err() == nil {
			for n := range q.Shards() {
				c, err := q.Claim(ctx, n, time.Now(), 30*time.Second, 100)
				if err != nil {
					return
				}
				for _, j := range c.Jobs {
					work <- j
				}
				if len(c.Jobs) > 0 {
					_, _ = q.AckLease(ctx, n, c.Lease)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	for range 4 {
		pipeline.Go(func() {
			for j := range work {
				if err := proc.ProcessClaimed(context.Background(), withdrawal.Ref{Shard: j.Shard, ID: j.ID},
					time.UnixMilli(j.Due).UTC()); err != nil && ctx.Err() == nil {
					t.Errorf("process %s: %v", j.ID, err)
				}
			}
		})
	}

	// The users: each withdrawal due soon, rescheduled by three racing
	// clients to times a few ms to 150 ms off, earlier and later.
	const n = 30
	var (
		mu      sync.Mutex
		answers []answer
		owner   = map[string]string{}
		users   sync.WaitGroup
	)
	for i := range n {
		user := fmt.Sprintf("user-%d", i)
		c, err := httpapi.CreateWithdrawal(ctx, svc, user, "k", []byte(`{"amount":"1.00","currency":"USD","destination":"d","delay_seconds":0}`))
		if err != nil {
			t.Fatal(err)
		}
		owner[c.ID] = user
		for range 3 {
			users.Go(func() {
				for range 4 {
					ahead := time.Duration(rand.IntN(150)) * time.Millisecond
					asked := time.Now().Add(ahead + time.Millisecond).Truncate(time.Millisecond)
					body := fmt.Sprintf(`{"process_at":%q}`, clock.Format(asked))
					w, err := httpapi.RescheduleWithdrawal(ctx, svc, user, c.ID, []byte(body), "")
					answered := time.Now()
					mu.Lock()
					answers = append(answers, answer{id: c.ID, asked: asked, answered: answered, w: w, err: err})
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
				}
			})
		}
	}
	users.Wait()

	// Everything ends paid.
	for id := range owner {
		for {
			w, err := led.Find(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if w.Status == withdrawal.Paid {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	pipeline.Wait()

	last := map[string]withdrawal.Withdrawal{}
	ok, refused, late := 0, 0, 0
	for _, a := range answers {
		var verr *validation.Error
		switch {
		case a.err == nil:
			ok++
			if a.w.Revision >= last[a.id].Revision {
				last[a.id] = a.w
			}
		case errors.Is(a.err, withdrawal.ErrNotReschedulable):
			refused++
			if a.w.Reschedulable() {
				t.Errorf("%s: 409 for a record that could move: %+v", a.id, a.w)
			}
		case errors.As(a.err, &verr) && len(verr.Errors) == 1 && verr.Errors[0].Message == "must not be in the past" &&
			a.asked.Before(a.answered):
			// A time a millisecond or two ahead can be past when a loaded
			// machine reaches the check: a 422 is right then, and only then.
			late++
		default:
			t.Errorf("%s: reschedule: %v", a.id, a.err)
		}
	}
	for id := range owner {
		w, err := led.Find(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		prov.mu.Lock()
		paidAt, pays := prov.at[id], prov.pays[id]
		prov.mu.Unlock()
		if pays != 1 {
			t.Errorf("%s paid %d times", id, pays)
		}
		if paidAt.Before(w.DueAt) {
			t.Errorf("%s paid at %s, before its due time %s", id, clock.Format(paidAt), clock.Format(w.DueAt))
		}
		if l, ok := last[id]; ok && !l.DueAt.Equal(w.DueAt) {
			t.Errorf("%s: the last 200 said due %s, it was paid as due %s", id, clock.Format(l.DueAt), clock.Format(w.DueAt))
		}
	}
	t.Logf("%d reschedules: %d answered 200, %d answered 409, %d asked a time past by their answer", len(answers), ok, refused, late)
	if ok == 0 || refused == 0 {
		t.Errorf("the race was not run: %d 200s, %d 409s", ok, refused)
	}
}
