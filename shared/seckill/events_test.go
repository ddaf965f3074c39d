package seckill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/seckill"
)

// Tests of issue 21 item 7: every order event is delivered at least once,
// whatever happens to its item afterwards (a re-preheat, with fewer shards
// too; the item forgotten after its retention).

// eventSale is a flash sale driven through the real pipeline: the poller
// over the queues the app polls, handing jobs to the consumer as SQS
// messages; the consumer publishes order events to a recorder that may
// refuse some buyers' events for a while.
type eventSale struct {
	t      *testing.T
	b      orderBackend
	clk    *clock.Fake
	store  *seckill.Store
	svc    *seckill.Service
	proc   *seckill.OrderProcessor
	comp   *seckill.Compensation
	poller *poller.Poller

	mu        sync.Mutex
	published []orders.Event
	refuse    map[string]bool // users whose events the channel refuses
}

func newEventSale(t *testing.T, b orderBackend, opts ...seckill.StoreOption) *eventSale {
	t.Helper()
	s := &eventSale{t: t, b: b, clk: clock.NewFake(t0), store: seckill.NewStore(b.rdb, "hg:", opts...), refuse: map[string]bool{}}
	s.svc = newService(t, s.store, s.clk)
	l := b.ledger()
	s.proc = seckill.NewOrderProcessor(s.store, l, s.clk, quiet)
	s.proc.Publisher = orders.PublisherFunc(func(_ context.Context, e orders.Event) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.refuse[e.UserID] {
			return fmt.Errorf("test: the channel refuses %s's events", e.UserID)
		}
		s.published = append(s.published, e)
		return nil
	})
	s.comp = &seckill.Compensation{Store: s.store, Orders: l, Clock: s.clk, Log: quiet}
	handler := consumer.New(consumer.Config{Jobs: map[string]consumer.JobFunc{seckill.JobKind: consumer.Orders(s.proc)},
		Logger: quiet, Clock: s.clk})
	var err error
	s.poller, err = poller.New(poller.Config{Queues: s.queues, Clock: s.clk, Logger: quiet, Ack: true,
		Dispatcher: sqsDispatcher{handler}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// queues is what the app's poller polls: the queues of the registered items.
func (s *eventSale) queues(ctx context.Context) ([]*delayq.Queue, error) {
	return s.store.Queues(ctx)
}

// sqsDispatcher hands jobs to the consumer as the SQS event Lambda would
// deliver: one message per job, its body the job's JSON.
type sqsDispatcher struct{ h *consumer.Handler }

func (d sqsDispatcher) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	ev := events.SQSEvent{}
	for i, j := range jobs {
		body, err := json.Marshal(j)
		if err != nil {
			return jobs, err
		}
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprint(i), Body: string(body)})
	}
	resp, err := d.h.Handle(ctx, ev)
	if err != nil {
		return jobs, err
	}
	var refused []delayq.Job
	for _, f := range resp.BatchItemFailures {
		var i int
		if _, err := fmt.Sscan(f.ItemIdentifier, &i); err != nil {
			return jobs, fmt.Errorf("batch item failure %q: %w", f.ItemIdentifier, err)
		}
		refused = append(refused, jobs[i])
	}
	return refused, nil
}

// poll runs poller rounds until one claims nothing.
func (s *eventSale) poll() {
	s.t.Helper()
	for range 20 {
		r, err := s.poller.Round(context.Background())
		if err != nil {
			s.t.Fatal(err)
		}
		if r.Claimed == 0 {
			return
		}
	}
	s.t.Fatal("jobs keep coming")
}

func (s *eventSale) events(typ string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.published {
		if e.Type == typ {
			out = append(out, e.UserID)
		}
	}
	slices.Sort(out)
	return out
}

func (s *eventSale) preheat(item string, stock, shards int, tm terms) {
	s.t.Helper()
	sale := tm.of(seckill.Sale{ItemID: item, Stock: int64(stock), Shards: shards, EndsAt: t0.Add(24 * time.Hour)})
	if _, err := s.svc.Preheat(context.Background(), sale); err != nil {
		s.t.Fatal(err)
	}
}

func (s *eventSale) buy(item, user string) seckill.Purchase {
	s.t.Helper()
	p, err := s.svc.Purchase(context.Background(), item, user, 1)
	if err != nil {
		s.t.Fatalf("%s: %v", user, err)
	}
	return p
}

// dead lists the dead jobs of every queue the app polls, as `hourglass dead
// list` does: "<queue>/<shard>/<id>".
func (s *eventSale) dead() []string {
	s.t.Helper()
	qs, err := s.queues(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, q := range qs {
		jobs, err := q.Dead(context.Background(), 100)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, j := range jobs {
			out = append(out, fmt.Sprintf("%s/%d/%s", q.Name(), j.Shard, j.ID))
		}
	}
	return out
}

// requeueDead requeues every dead job of every queue the app polls, as
// `hourglass dead requeue --all` does, queue by queue.
func (s *eventSale) requeueDead() int {
	s.t.Helper()
	ctx := context.Background()
	qs, err := s.queues(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	moved := 0
	for _, q := range qs {
		for n := range q.Shards() {
			b, err := q.RequeueDead(ctx, n, s.clk.Now(), 100)
			if err != nil {
				s.t.Fatal(err)
			}
			moved += len(b.IDs)
		}
	}
	return moved
}

// killEvents dead-letters the order events of user queued on item's shard
// n, as the local consumer does after their last delivery failed.
func (s *eventSale) killEvents(item string, shards, n int, user string) []string {
	s.t.Helper()
	ctx := context.Background()
	q, err := s.store.Queue(item, shards)
	if err != nil {
		s.t.Fatal(err)
	}
	s.clk.Advance(poller.DefaultRetryDelay) // the refused event is due again
	c, err := q.Claim(ctx, n, s.clk.Now(), time.Minute, 100)
	if err != nil {
		s.t.Fatal(err)
	}
	var killed []string
	for _, j := range c.Jobs {
		if strings.HasPrefix(j.ID, "ev|") && strings.HasSuffix(j.ID, "|"+user) {
			if err := q.Kill(ctx, n, j.ID, c.Lease, s.clk.Now()); err != nil {
				s.t.Fatal(err)
			}
			killed = append(killed, fmt.Sprintf("%s/%d/%s", q.Name(), n, j.ID))
		} else if err := q.RetryAt(ctx, n, j.ID, c.Lease, s.clk.Now()); err != nil {
			s.t.Fatal(err)
		}
	}
	if len(killed) == 0 {
		s.t.Fatalf("no event of %s queued on shard %d", user, n)
	}
	return killed
}

// TestDeadOrderEventsOutliveTheirSale: bob's order.created event failed
// every delivery and waits in the dead set of its shard for an operator.
// The item is then preheated again (with as many shards, or fewer, so that
// bob's shard is no longer part of the sale), or it ends and its retention
// passes. The dead event is still listed, and once requeued it is
// delivered; only then is the item forgotten.
func TestDeadOrderEventsOutliveTheirSale(t *testing.T) {
	for _, tc := range []struct {
		name   string
		then   func(s *eventSale)
		shards int // of the sale after
	}{
		{"preheated again", func(s *eventSale) { s.preheat("phone", 4, 2, terms{}) }, 2},
		{"preheated again with fewer shards", func(s *eventSale) { s.preheat("phone", 3, 1, terms{}) }, 1},
		{"forgotten", func(s *eventSale) {
			s.clk.Set(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(seckill.DefaultRetention + time.Minute))
			if _, err := s.comp.Run(context.Background(), s.clk.Now()); err != nil {
				s.t.Fatal(err)
			}
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachOrderBackend(t, func(t *testing.T, b orderBackend) {
				ctx := context.Background()
				s := newEventSale(t, b)
				s.preheat("phone", 4, 2, terms{})
				alice, bob := usersHomedAt("alice", 0, 2, 1)[0], usersHomedAt("bob", 1, 2, 1)[0]
				s.buy("phone", alice)
				s.buy("phone", bob)
				s.refuse[bob] = true
				s.poll() // orders made; alice's event out, bob's refused
				killed := s.killEvents("phone", 2, 1, bob)
				s.refuse[bob] = false
				s.poll()
				if got := s.events(orders.Created); !slices.Equal(got, []string{alice}) {
					t.Fatalf("order.created for %q before the dead event is requeued, want alice's", got)
				}

				tc.then(s)
				if got := s.dead(); !slices.Equal(got, killed) {
					t.Fatalf("dead jobs listed: %q, want bob's event %q", got, killed)
				}
				if n := s.requeueDead(); n != 1 {
					t.Fatalf("requeued %d dead jobs, want 1", n)
				}
				s.poll()
				if got := s.events(orders.Created); !slices.Contains(got, bob) {
					t.Fatalf("order.created for %q, want bob's too once requeued", got)
				}

				// A shard the sale no longer uses is polled until its queue
				// is empty, then retired.
				if _, err := s.comp.Run(ctx, s.clk.Now()); err != nil {
					t.Fatal(err)
				}
				if reg, err := s.store.Registration(ctx, "phone"); err != nil || (reg != (seckill.Registration{}) &&
					(reg.Shards != tc.shards || reg.Polled != tc.shards)) {
					t.Fatalf("registered %+v (%v), want %d shards polled once the dropped one is empty", reg, err, tc.shards)
				}

				// With every queue empty, the item is forgotten after its
				// retention, and nothing is left behind.
				s.clk.Set(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(seckill.DefaultRetention + time.Hour))
				if _, err := s.comp.Run(ctx, s.clk.Now()); err != nil {
					t.Fatal(err)
				}
				if n, err := s.store.Shards(ctx, "phone"); err != nil || n != 0 {
					t.Fatalf("item still registered with %d shards (%v) once every queue is empty", n, err)
				}
				for n := range 2 {
					k := shardKeys("phone", n)
					if c, err := b.rdb.Exists(ctx, k.Due, k.Inflight, k.Dead).Result(); err != nil || c != 0 {
						t.Fatalf("shard %d keeps %d queue keys (%v)", n, c, err)
					}
				}
			})
		})
	}
}

// TestLateRefundAfterTheItemIsForgotten: an order expired unpaid; a week
// after the sale ended the item is forgotten; then the buyer's payment
// arrives. It is answered refund_required, and its payment.refund_required
// event goes out through the poller and the consumer like any other.
func TestLateRefundAfterTheItemIsForgotten(t *testing.T) {
	eachOrderBackend(t, func(t *testing.T, b orderBackend) {
		ctx := context.Background()
		s := newEventSale(t, b)
		s.preheat("phone", 1, 1, terms{"9.99", "CNY", 30 * time.Second})
		alice := s.buy("phone", "alice")
		s.poll()
		s.clk.Advance(31 * time.Second)
		s.poll()
		if got := s.events(orders.Expired); !slices.Equal(got, []string{"alice"}) {
			t.Fatalf("order.expired for %q, want alice's", got)
		}
		s.clk.Set(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(seckill.DefaultRetention + time.Minute))
		rep, err := s.comp.Run(ctx, s.clk.Now())
		if err != nil || rep.Unregistered != 1 {
			t.Fatalf("compensation past the retention: %+v %v, want the item forgotten", rep, err)
		}

		ans, err := httpapi.ApplyPayment(ctx, s.proc, payBody("evt_late", seckill.OrderID(alice.ID), "succeeded", "9.99", "CNY"))
		if err != nil || !ans.RefundRequired || ans.Status != seckill.Expired {
			t.Fatalf("late payment: %+v %v, want expired with a refund required", ans, err)
		}
		s.poll()
		if got := s.events(orders.RefundRequired); !slices.Equal(got, []string{"alice"}) {
			t.Fatalf("payment.refund_required for %q, want alice's", got)
		}
		// Nothing waits anywhere.
		qs, err := s.queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			st, err := q.Stats(ctx, s.clk.Now())
			if err != nil || st != (delayq.Stats{}) {
				t.Fatalf("queue %s: %+v %v", q.Name(), st, err)
			}
		}
	})
}
