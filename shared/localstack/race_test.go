package localstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/localstack"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// payouts wraps the provider and counts its calls per withdrawal.
type payouts struct {
	inner withdrawal.Provider

	mu    sync.Mutex
	calls map[string]int
}

func (p *payouts) Pay(ctx context.Context, w withdrawal.Withdrawal) (string, error) {
	p.mu.Lock()
	p.calls[w.ID]++
	p.mu.Unlock()
	return p.inner.Pay(ctx, w)
}

func (p *payouts) Lookup(ctx context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	return p.inner.Lookup(ctx, w)
}

func (p *payouts) of(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

// finance records every message finance receives.
type finance struct {
	mu   sync.Mutex
	msgs map[string][]withdrawal.Processed
}

func (f *finance) Notify(_ context.Context, m withdrawal.Processed) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs[m.WithdrawalID] = append(f.msgs[m.WithdrawalID], m)
	return nil
}

func (f *finance) of(id string) []withdrawal.Processed {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]withdrawal.Processed(nil), f.msgs[id]...)
}

// tracker counts, per job id, the jobs handed to the work queue and the
// messages the consumer finished with success, so a test knows when the
// work it started has run to its end.
type tracker struct {
	mu         sync.Mutex
	dispatched map[string]int
	succeeded  map[string]int
}

func newTracker() *tracker {
	return &tracker{dispatched: map[string]int{}, succeeded: map[string]int{}}
}

// handler wraps a consumer handler.
func (tr *tracker) handler(h localstack.BatchHandler) localstack.BatchHandler {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		resp, err := h(ctx, ev)
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, m := range ev.Records {
			var j delayq.Job
			if err == nil && !failed[m.MessageId] && json.Unmarshal([]byte(m.Body), &j) == nil {
				tr.succeeded[j.ID]++
			}
		}
		return resp, err
	}
}

// dispatcher wraps a dispatcher.
func (tr *tracker) dispatcher(d poller.Dispatcher) poller.Dispatcher {
	return dispatchFunc(func(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
		refused, err := d.Dispatch(ctx, jobs)
		no := map[string]bool{}
		for _, j := range refused {
			no[j.ID] = true
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, j := range jobs {
			if !no[j.ID] {
				tr.dispatched[j.ID]++
			}
		}
		return refused, err
	})
}

// done reports whether every accepted job id was finished by the consumer.
func (tr *tracker) done(id string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.succeeded[id] >= tr.dispatched[id]
}

// handedOver reports whether a job for id was accepted by the work queue.
func (tr *tracker) handedOver(id string) bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.dispatched[id] > 0
}

type dispatchFunc func(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error)

func (f dispatchFunc) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	return f(ctx, jobs)
}

// syncConsumer is a dispatcher that runs the consumer on the jobs at once,
// inside the poller's round, as one SQS batch; what fails is refused.
func syncConsumer(h localstack.BatchHandler) poller.Dispatcher {
	return dispatchFunc(func(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
		ev := events.SQSEvent{}
		byMsg := map[string]delayq.Job{}
		for i, j := range jobs {
			b, err := json.Marshal(j)
			if err != nil {
				return jobs, err
			}
			id := fmt.Sprintf("sync-%d", i)
			byMsg[id] = j
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, Body: string(b), EventSource: "aws:sqs",
				Attributes: map[string]string{"ApproximateReceiveCount": "1"}})
		}
		resp, err := h(ctx, ev)
		if err != nil {
			return jobs, err
		}
		var refused []delayq.Job
		for _, f := range resp.BatchItemFailures {
			refused = append(refused, byMsg[f.ItemIdentifier])
		}
		return refused, nil
	})
}

// logBuffer keeps the stack's logs, shown when a test fails.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// stack is the local stack's withdrawal parts wired by app, on a real
// redis-server, with the provider and finance recorded.
type stack struct {
	app      *app.App
	poller   *poller.Poller
	payouts  *payouts
	finance  *finance
	tracker  *tracker
	queue    *localstack.WorkQueue // nil with the synchronous consumer
	closeWQ  func()
	redisSrv *redistest.Server
}

func newStack(t *testing.T, workQueue bool) *stack {
	t.Helper()
	srv := redistest.Start(t)
	for k, v := range map[string]string{
		"REDIS_URL": srv.URL(), "HOURGLASS_AUTH": "dev", "HOURGLASS_REDIS_PREFIX": "hg:",
		"PAYOUT_URL": "", "FINANCE_WEBHOOK_URL": "", "FINANCE_TOPIC_ARN": "",
		"HOURGLASS_QUEUE_SHARDS": "1", "HOURGLASS_LEASE": "30s", "HOURGLASS_MAX_ATTEMPTS": "8",
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
	} {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.AssertNoRefusals(t)
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last logs:\n%s", logs.tail(8<<10))
		}
	})
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(logs, nil)), rdb)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := a.Provider(true)
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{
		app: a, payouts: &payouts{inner: sim, calls: map[string]int{}},
		finance: &finance{msgs: map[string][]withdrawal.Processed{}}, tracker: newTracker(), redisSrv: srv,
		closeWQ: func() {},
	}
	proc, err := a.Processor(s.payouts, s.finance)
	if err != nil {
		t.Fatal(err)
	}
	handle := s.tracker.handler(a.Consumer(proc, true).Handle)
	var d poller.Dispatcher
	if workQueue {
		s.queue = localstack.NewWorkQueue(localstack.WorkQueueConfig{
			Handler: handle, Kill: a.Kill, Visibility: 50 * time.Millisecond, MaxReceives: 10, Log: a.Log,
		})
		s.queue.Start()
		var once sync.Once
		s.closeWQ = func() { once.Do(s.queue.Close) }
		t.Cleanup(s.closeWQ)
		d = s.queue
	} else {
		d = syncConsumer(handle)
	}
	// As the local stack wires it: the consumer acks, not the poller.
	if s.poller, err = a.Poller(s.tracker.dispatcher(d), false); err != nil {
		t.Fatal(err)
	}
	return s
}

const raceUser = "user-race"

// settle waits until withdrawal id is final, every job handed over for it
// has been finished by the consumer, and its queue shard holds nothing.
func (s *stack) settle(t *testing.T, id string) withdrawal.Withdrawal {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for {
		w, err := s.app.Service.Get(ctx, raceUser, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		st, err := s.app.Withdrawals.Stats(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if w.Status.Final() && s.tracker.done(id) && st.Due == 0 && st.Inflight == 0 {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not settle within 15s: status %s, queue %+v", id, w.Status, st)
		}
		// A job the consumer failed comes back to the poller (the synchronous
		// consumer) after RetryDelay; with the work queue this finds nothing.
		if _, err := s.poller.Round(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Invariant 3 under a real race: a user cancels a withdrawal just as the
// poller claims it and the consumer pays it out. Each time exactly one of
// them wins: cancelled and never paid, or paid and the cancel refused (409).
func TestCancelRacingWithThePollersClaim(t *testing.T) {
	const rounds = 200
	for _, tc := range []struct {
		name      string
		workQueue bool
	}{
		{"synchronous consumer", false},
		{"work queue", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStack(t, tc.workQueue)
			ctx := context.Background()
			var cancelled, paid []string
			afterClaim := 0 // cancelled while the job was already claimed and handed over
			for i := range rounds {
				c, err := httpapi.CreateWithdrawal(ctx, s.app.Service, raceUser, fmt.Sprintf("race-%d", i),
					[]byte(`{"amount":"10.00","currency":"CNY","destination":"bank_6222","delay_seconds":0}`))
				if err != nil {
					t.Fatalf("create %d: %v", i, err)
				}
				id := c.ID

				var (
					wg        sync.WaitGroup
					cancelW   withdrawal.Withdrawal
					cancelErr error
					roundErr  error
					start     = make(chan struct{})
				)
				wg.Go(func() {
					<-start
					// A varying head start for the poller moves the cancel across
					// its claim, the hand-over and the payout step.
					time.Sleep(time.Duration(i%10) * 40 * time.Microsecond)
					cancelW, cancelErr = s.app.Service.Cancel(ctx, raceUser, id)
				})
				wg.Go(func() {
					<-start
					_, roundErr = s.poller.Round(ctx)
				})
				close(start)
				wg.Wait()
				if roundErr != nil {
					t.Fatalf("%d: round: %v", i, roundErr)
				}
				final := s.settle(t, id)

				calls, told := s.payouts.of(id), s.finance.of(id)
				switch {
				case cancelErr == nil:
					cancelled = append(cancelled, id)
					if cancelW.Status != withdrawal.Cancelled || final.Status != withdrawal.Cancelled {
						t.Fatalf("%d: cancel succeeded with status %s, ends %s", i, cancelW.Status, final.Status)
					}
					if calls != 0 || len(told) != 0 {
						t.Fatalf("%d: cancelled %s yet the provider was called %d times and finance told %d times",
							i, id, calls, len(told))
					}
					if s.tracker.handedOver(id) {
						afterClaim++
					}
				case errors.Is(cancelErr, withdrawal.ErrNotCancellable):
					paid = append(paid, id)
					if final.Status != withdrawal.Paid {
						t.Fatalf("%d: cancel refused (%s) but %s ends %s, want paid", i, cancelW.Status, id, final.Status)
					}
					if calls != 1 || final.Attempts != 1 {
						t.Fatalf("%d: paid %s with %d provider calls, %d attempts; want exactly 1", i, id, calls, final.Attempts)
					}
					if len(told) == 0 {
						t.Fatalf("%d: %s paid but finance was never told", i, id)
					}
					for _, m := range told {
						if m.Status != withdrawal.Paid || m.WithdrawalID != id || m.Type != withdrawal.ProcessedType {
							t.Fatalf("%d: finance got %+v", i, m)
						}
					}
				default:
					t.Fatalf("%d: cancel of %s: %v", i, id, cancelErr)
				}
			}

			// Nothing runs late: once the work queue has stopped, look again.
			s.closeWQ()
			for _, id := range cancelled {
				if n, told := s.payouts.of(id), s.finance.of(id); n != 0 || len(told) != 0 {
					t.Errorf("cancelled %s: %d provider calls, %d finance messages, after the fact", id, n, len(told))
				}
			}
			for _, id := range paid {
				if n := s.payouts.of(id); n != 1 {
					t.Errorf("paid %s: %d provider calls in the end", id, n)
				}
			}
			st, err := s.app.Withdrawals.Stats(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st != (delayq.Stats{}) {
				t.Errorf("queue after the race: %+v, want empty", st)
			}
			t.Logf("%d races: %d cancelled before the payout (%d of them after the poller had handed the job over), %d paid with the cancel refused",
				rounds, len(cancelled), afterClaim, len(paid))
			if len(cancelled) == 0 || len(paid) == 0 {
				t.Logf("only one outcome came up this run; the invariants held for every race")
			}

			s.checkHTTP(t, cancelled, paid)
		})
	}
}

// checkHTTP sends DELETE through the HTTP API: a paid withdrawal answers 409
// not_cancellable, a cancelled one 200 again.
func (s *stack) checkHTTP(t *testing.T, cancelled, paid []string) {
	t.Helper()
	raw, err := os.ReadFile("../../events/withdrawal-cancel.json")
	if err != nil {
		t.Fatal(err)
	}
	h := lambda.NewHandler(s.app.Router().Serve)
	del := func(id string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(raw, &ev); err != nil {
			t.Fatal(err)
		}
		ev.RawPath = "/v1/withdrawals/" + id
		ev.RequestContext.HTTP.Path = ev.RawPath
		ev.PathParameters = map[string]string{"id": id}
		ev.Headers["x-user-id"] = raceUser
		payload, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out, err := h.Invoke(context.Background(), payload)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if len(paid) > 0 {
		resp := del(paid[0])
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		}
		_ = json.Unmarshal([]byte(resp.Body), &p)
		if resp.StatusCode != http.StatusConflict || p.Code != "not_cancellable" || p.Status != http.StatusConflict {
			t.Errorf("DELETE of paid %s: %d %s, want 409 not_cancellable", paid[0], resp.StatusCode, resp.Body)
		}
	}
	if len(cancelled) > 0 {
		if resp := del(cancelled[0]); resp.StatusCode != http.StatusOK {
			t.Errorf("DELETE of cancelled %s again: %d %s, want 200", cancelled[0], resp.StatusCode, resp.Body)
		}
	}
}
