package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// stack is the AWS-shaped pipeline in one process: the poller hands jobs to
// a capturing dispatcher standing in for SQS (and acks them, as with SQS),
// and the test feeds the captured messages to the consumer Lambda handler.
type stack struct {
	a        *app.App
	consumer lambda.Handler
	provider *fakes.Provider
	finance  *fakes.Finance
	sent     *capture
	poll     func() // one poller round
}

type capture struct {
	mu   sync.Mutex
	jobs []delayq.Job
}

func (c *capture) Dispatch(_ context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs = append(c.jobs, jobs...)
	return nil, nil
}

func (c *capture) take() []delayq.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.jobs
	c.jobs = nil
	return out
}

func newStack(t *testing.T, script ...int) *stack {
	t.Helper()
	s := redistest.Start(t)
	prov := fakes.NewProvider(t, "pay-secret", script...)
	fin := fakes.NewFinance(t, "fin-secret")
	for k, v := range map[string]string{
		"REDIS_URL": s.URL(), "HOURGLASS_AUTH": "jwt", "PAYOUT_URL": prov.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": fin.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_RETRY_BASE": "20ms", "HOURGLASS_RETRY_CAP": "40ms", "HOURGLASS_MAX_ATTEMPTS": "5",
	} {
		t.Setenv(k, v)
	}
	return wireStack(t, appFromEnv(t, config.Lambda), prov, fin)
}

// wireStack builds a's consumer (through prov and fin) and a poller handing
// jobs to it, as a Lambda deployment wires them.
func wireStack(t *testing.T, a *app.App, prov *fakes.Provider, fin *fakes.Finance) *stack {
	t.Helper()
	provider, err := a.Provider(false)
	if err != nil {
		t.Fatal(err)
	}
	notifier, err := a.Notifier(context.Background(), os.Stdout, false)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		t.Fatal(err)
	}
	st := &stack{a: a, consumer: lambda.NewHandler(a.Consumer(proc, false).Handle), provider: prov, finance: fin, sent: &capture{}}
	p, err := a.Poller(st.sent, true)
	if err != nil {
		t.Fatal(err)
	}
	st.poll = func() {
		if _, err := p.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func (s *stack) create(t *testing.T, user string) string {
	t.Helper()
	c, err := httpapi.CreateWithdrawal(context.Background(), s.a.Service, user, "key-"+user,
		[]byte(`{"amount":"88.80","currency":"CNY","destination":"bank_6222","delay_seconds":0}`))
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// deliver feeds jobs to the consumer Lambda as one SQS event and returns the
// ids of the messages it reported failed.
func (s *stack) deliver(t *testing.T, jobs ...delayq.Job) []string {
	t.Helper()
	ev := events.SQSEvent{}
	for i, j := range jobs {
		body, _ := json.Marshal(j)
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: j.ID + "-" + string(rune('a'+i)), Body: string(body), EventSource: "aws:sqs"})
	}
	payload, _ := json.Marshal(ev)
	out, err := s.consumer.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatal(err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	return failed
}

// drain polls and delivers until the withdrawal is final or the test gives up.
func (s *stack) drain(t *testing.T, user, id string) withdrawal.Withdrawal {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s.poll()
		if jobs := s.sent.take(); len(jobs) > 0 {
			s.deliver(t, jobs...)
		}
		w, err := s.a.Service.Get(context.Background(), user, id)
		if err != nil {
			t.Fatal(err)
		}
		if w.Status.Final() && !w.Untold() {
			return w
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("withdrawal %s did not finish", id)
	return withdrawal.Withdrawal{}
}

func TestDuplicateDeliveryPaysOnce(t *testing.T) {
	s := newStack(t)
	id := s.create(t, "alice")
	s.poll()
	jobs := s.sent.take()
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("poller sent %v", jobs)
	}
	// SQS delivers the one message three times: twice in one batch (two
	// consumers at once) and once more later.
	failed := s.deliver(t, jobs[0], jobs[0])
	if len(failed) > 1 {
		t.Fatalf("both concurrent deliveries failed: %v", failed)
	}
	if len(failed) == 1 { // the loser was told the payout is busy elsewhere
		s.deliver(t, jobs[0])
	}
	s.deliver(t, jobs[0])

	calls, paid := s.provider.Calls(id)
	if !paid || calls != 1 {
		t.Fatalf("provider: %d calls, paid %v; want one call", calls, paid)
	}
	w, err := s.a.Service.Get(context.Background(), "alice", id)
	if err != nil || w.Status != withdrawal.Paid || w.Attempts != 1 || w.PayoutID != "po_"+id {
		t.Fatalf("ledger %+v %v", w, err)
	}
	// Finance hears at least once; a delivery that finds the payout done but
	// not yet reported may report it too: the same message, the same key.
	msgs := s.finance.Of(id)
	if len(msgs) == 0 || msgs[0].Status != withdrawal.Paid || msgs[0].PayoutID != "po_"+id || msgs[0].Amount != "88.80" {
		t.Fatalf("finance got %+v", msgs)
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Fatalf("finance got differing messages for one payout: %+v", msgs)
		}
	}
	var body map[string]string
	_ = json.Unmarshal(s.provider.Body(id), &body)
	want := map[string]string{"withdrawal_id": id, "user_id": "alice", "amount": "88.80", "currency": "CNY", "destination": "bank_6222"}
	if len(body) != len(want) {
		t.Fatalf("provider body %v", body)
	}
	for k, v := range want {
		if body[k] != v {
			t.Fatalf("provider body %v, want %v", body, want)
		}
	}
}

func TestProviderErrorsTwiceThenPaid(t *testing.T) {
	s := newStack(t, http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusOK)
	id := s.create(t, "alice")
	w := s.drain(t, "alice", id)
	if w.Status != withdrawal.Paid || w.Attempts != 3 {
		t.Fatalf("after 500, 503, 200: %+v", w)
	}
	if calls, _ := s.provider.Calls(id); calls != 3 {
		t.Fatalf("provider called %d times under one key, want 3", calls)
	}
	if msgs := s.finance.Of(id); len(msgs) != 1 || msgs[0].Attempts != 3 || msgs[0].Status != withdrawal.Paid {
		t.Fatalf("finance got %+v", msgs)
	}
}

func TestProviderRefusalFailsAtOnce(t *testing.T) {
	s := newStack(t, http.StatusBadRequest)
	id := s.create(t, "alice")
	w := s.drain(t, "alice", id)
	if w.Status != withdrawal.Failed || w.Attempts != 1 || w.LastError == "" {
		t.Fatalf("after a 400: %+v", w)
	}
	if msgs := s.finance.Of(id); len(msgs) != 1 || msgs[0].Status != withdrawal.Failed || msgs[0].PayoutID != "" {
		t.Fatalf("finance got %+v", msgs)
	}
}

func TestProviderDownExhaustsAttempts(t *testing.T) {
	s := newStack(t, 500, 502, 503, 429, 408)
	id := s.create(t, "alice")
	w := s.drain(t, "alice", id)
	if w.Status != withdrawal.Failed || w.Attempts != 5 || w.LastError == "" {
		t.Fatalf("after 5 transient failures: %+v", w)
	}
	if msgs := s.finance.Of(id); len(msgs) != 1 || msgs[0].Status != withdrawal.Failed {
		t.Fatalf("finance got %+v", msgs)
	}
}
