package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is events/consumer-sqs.json, decoded.
func fixture(t *testing.T) ([]byte, events.SQSEvent) {
	t.Helper()
	raw, err := os.ReadFile("../../events/consumer-sqs.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Records) == 0 {
		t.Fatal("fixture has no records")
	}
	return raw, ev
}

// invoke runs h through the Lambda library, from raw JSON to raw JSON.
func invoke(t *testing.T, h *consumer.Handler, payload []byte) events.SQSEventResponse {
	t.Helper()
	out, err := lambda.NewHandler(h.Handle).Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	return resp
}

func failedIDs(resp events.SQSEventResponse) []string {
	out := make([]string, 0, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		out = append(out, f.ItemIdentifier)
	}
	sort.Strings(out)
	return out
}

// batch builds an SQS event of the given bodies from the fixture's record.
func batch(t *testing.T, bodies ...string) (events.SQSEvent, []byte) {
	t.Helper()
	_, tmpl := fixture(t)
	ev := events.SQSEvent{}
	for i, b := range bodies {
		r := tmpl.Records[0]
		r.MessageId = fmt.Sprintf("msg-%02d", i)
		r.ReceiptHandle = fmt.Sprintf("rh-%02d", i)
		r.Body = b
		ev.Records = append(ev.Records, r)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return ev, payload
}

func body(t *testing.T, j delayq.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// calls records job runs and acks, safely across the handler's goroutines.
type calls struct {
	mu   sync.Mutex
	ran  []delayq.Job
	acks []delayq.Job
}

func (c *calls) run(j delayq.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ran = append(c.ran, j)
}

func (c *calls) ack(j delayq.Job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acks = append(c.acks, j)
}

func byID(jobs []delayq.Job) []delayq.Job {
	out := append([]delayq.Job(nil), jobs...)
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

func TestFixtureThroughTheLambdaLibrary(t *testing.T) {
	payload, ev := fixture(t)
	want := delayq.Job{Kind: "withdrawal.payout", Queue: "withdrawals", Shard: 0,
		ID: "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", Due: 1795948200000}
	cases := []struct {
		name   string
		err    error
		failed []string
	}{
		{"job done", nil, []string{}},
		{"job fails", errors.New("provider: 503"), []string{ev.Records[0].MessageId}},
		{"job fails wrapped", fmt.Errorf("ledger: %w", errors.New("timeout")), []string{ev.Records[0].MessageId}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c calls
			h := consumer.New(consumer.Config{
				Jobs: map[string]consumer.JobFunc{withdrawal.JobKind: func(_ context.Context, j delayq.Job) error {
					c.run(j)
					return tc.err
				}},
				Ack:    func(_ context.Context, j delayq.Job) error { c.ack(j); return nil },
				Logger: quiet,
			})
			resp := invoke(t, h, payload)
			if diff := cmp.Diff(tc.failed, failedIDs(resp)); diff != "" {
				t.Fatalf("batch item failures (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]delayq.Job{want}, c.ran); diff != "" {
				t.Fatalf("jobs run (-want +got):\n%s", diff)
			}
			// The fixture's job carries no lease (lease 0): nothing to ack.
			if len(c.acks) != 0 {
				t.Fatalf("acked %v for a job without a lease", c.acks)
			}
		})
	}
}

// A batch of ten with every kind of outcome: exactly the messages that failed
// are reported, and only successful leased jobs are acked.
func TestBatchReportsExactlyTheFailedMessages(t *testing.T) {
	job := func(i int, kind string, lease int64) delayq.Job {
		return delayq.Job{Kind: kind, Queue: "withdrawals", Shard: i % 2, ID: fmt.Sprintf("wd_%02d", i), Due: 1795948200000, Lease: lease}
	}
	const (
		pay   = "withdrawal.payout"
		order = "seckill.order"
	)
	type msg struct {
		body   string
		job    *delayq.Job // what the job func should see, if it runs
		err    error       // what the job func returns
		fail   bool        // reported as a batch item failure
		acked  bool
		ackErr error
	}
	j := func(i int, kind string, lease int64) *delayq.Job { jj := job(i, kind, lease); return &jj }
	msgs := []msg{
		{job: j(0, pay, 1001), acked: true},
		{job: j(1, pay, 1002), err: errors.New("provider: 503"), fail: true},
		{job: j(2, order, 0)}, // no lease: done, not acked
		{job: j(3, pay, 1004), err: fmt.Errorf("process: %w", errors.New("ledger down")), fail: true},
		{body: `{"kind":"withdrawal.payout",`, fail: true},
		{body: body(t, job(5, "seckill.refund", 1006)), fail: true},
		{job: j(6, order, 1007), acked: true},
		{body: `{"kind":"withdrawal.payout","queue":"withdrawals","shard":0,"id":"wd_07","due_ms":1,"extra":1}`, fail: true},
		// A failed ack does not fail the message: the job is done.
		{job: j(8, pay, 1009), acked: true, ackErr: errors.New("redis: timeout")},
		{job: j(9, order, 1010), err: errors.New("ledger: down"), fail: true},
	}
	bodies := make([]string, len(msgs))
	outcome := map[string]msg{}
	var wantFailed []string
	var wantRan, wantAcked []delayq.Job
	for i, m := range msgs {
		if m.job != nil {
			m.body = body(t, *m.job)
			outcome[m.job.ID] = m
			wantRan = append(wantRan, *m.job)
			if m.acked {
				wantAcked = append(wantAcked, *m.job)
			}
		}
		bodies[i] = m.body
		if m.fail {
			wantFailed = append(wantFailed, fmt.Sprintf("msg-%02d", i))
		}
	}
	_, payload := batch(t, bodies...)

	var c calls
	run := func(_ context.Context, jb delayq.Job) error {
		c.run(jb)
		return outcome[jb.ID].err
	}
	h := consumer.New(consumer.Config{
		Jobs: map[string]consumer.JobFunc{pay: run, order: run},
		Ack: func(_ context.Context, jb delayq.Job) error {
			c.ack(jb)
			return outcome[jb.ID].ackErr
		},
		Logger: quiet,
	})
	resp := invoke(t, h, payload)
	if diff := cmp.Diff(wantFailed, failedIDs(resp)); diff != "" {
		t.Fatalf("batch item failures (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(byID(wantRan), byID(c.ran)); diff != "" {
		t.Fatalf("jobs run (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(byID(wantAcked), byID(c.acks)); diff != "" {
		t.Fatalf("acks (-want +got):\n%s", diff)
	}
}

// The messages of a batch run at once: each job waits for all ten to have
// started, which only concurrent runs can satisfy.
func TestBatchRunsMessagesConcurrently(t *testing.T) {
	const n = 10
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = body(t, delayq.Job{Kind: "withdrawal.payout", Queue: "withdrawals", ID: fmt.Sprintf("wd_%02d", i), Due: 1, Lease: 2})
	}
	_, payload := batch(t, bodies...)
	var started atomic.Int32
	all := make(chan struct{})
	var acks atomic.Int32
	h := consumer.New(consumer.Config{
		Jobs: map[string]consumer.JobFunc{"withdrawal.payout": func(ctx context.Context, _ delayq.Job) error {
			if started.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
				return nil
			case <-time.After(10 * time.Second):
				return fmt.Errorf("only %d of %d messages started: they do not run concurrently", started.Load(), n)
			}
		}},
		Ack:    func(context.Context, delayq.Job) error { acks.Add(1); return nil },
		Logger: quiet,
	})
	resp := invoke(t, h, payload)
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v: only %d of %d messages ran at once", failedIDs(resp), started.Load(), n)
	}
	if acks.Load() != n {
		t.Fatalf("%d acks, want %d", acks.Load(), n)
	}
}

func TestWithdrawalsRefusesJobsOfOtherQueues(t *testing.T) {
	// The check comes before the processor is used, so none is needed.
	run := consumer.Withdrawals(nil)
	err := run(context.Background(), delayq.Job{Kind: withdrawal.JobKind, Queue: "orders", ID: "wd_1"})
	if err == nil {
		t.Fatal("a payout job from another queue was accepted")
	}
}
