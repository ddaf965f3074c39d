package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// paysThenAnswersLate is a provider that pays on the first call but answers
// it only after hold (past PAYOUT_TIMEOUT), then answers 503 to every call.
func paysThenAnswersLate(hold time.Duration) fakes.Rule {
	return func(_ string, _ fakes.Payout, n int) (int, time.Duration) {
		if n == 1 {
			return http.StatusOK, hold
		}
		return http.StatusServiceUnavailable, 0
	}
}

// financeNeverToldFailed checks that finance heard of id only as paid.
func financeNeverToldFailed(t *testing.T, s *stack, id string) {
	t.Helper()
	msgs := s.finance.Of(id)
	if len(msgs) == 0 {
		t.Fatalf("finance never told of %s", id)
	}
	for _, m := range msgs {
		if m.Status != withdrawal.Paid {
			t.Fatalf("finance told %s for a payout the provider made: %+v", m.Status, msgs)
		}
	}
}

// TestPaidButAnsweredLateIsNeverFailed (issue 13, "paid, then recorded
// failed"): the provider pays on the first call, its answer comes after
// PAYOUT_TIMEOUT, and every later call under the same key gets 503 until
// HOURGLASS_MAX_ATTEMPTS is used up. The money left: the withdrawal must end
// paid and finance must never hear "failed".
func TestPaidButAnsweredLateIsNeverFailed(t *testing.T) {
	t.Setenv("PAYOUT_TIMEOUT", "100ms")
	s := newStack(t)
	s.provider.Decide(paysThenAnswersLate(400 * time.Millisecond))
	id := s.create(t, "alice")
	w := s.drain(t, "alice", id)
	if w.Status != withdrawal.Paid {
		t.Fatalf("the provider paid %s, the ledger says %s (%s)", id, w.Status, w.LastError)
	}
	if _, paid := s.provider.Calls(id); !paid || s.provider.Paid() != 1 {
		t.Fatalf("provider paid %d payouts", s.provider.Paid())
	}
	financeNeverToldFailed(t, s, id)
}

// TestPaidButAnsweredLateIsNotCancellable (issue 13, "paid, then
// cancelled"): after such a timed-out call the user sees processing and a
// cancel is refused; the withdrawal then ends paid.
func TestPaidButAnsweredLateIsNotCancellable(t *testing.T) {
	t.Setenv("PAYOUT_TIMEOUT", "100ms")
	s := newStack(t)
	s.provider.Decide(paysThenAnswersLate(400 * time.Millisecond))
	id := s.create(t, "alice")
	s.poll()
	jobs := s.sent.take()
	if len(jobs) != 1 {
		t.Fatalf("poller sent %v", jobs)
	}
	s.deliver(t, jobs...)
	ctx := context.Background()
	w, err := s.a.Service.Get(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if st := httpapi.ViewOf(w).Status; st != withdrawal.Processing {
		t.Fatalf("after a call that may have paid the user sees %s, want processing", st)
	}
	if got, err := s.a.Service.Cancel(ctx, "alice", id); !errors.Is(err, withdrawal.ErrNotCancellable) {
		t.Fatalf("cancel after a call that may have paid: %s %v, want not cancellable", got.Status, err)
	}
	if w := s.drain(t, "alice", id); w.Status != withdrawal.Paid {
		t.Fatalf("the provider paid %s, the ledger says %s", id, w.Status)
	}
	financeNeverToldFailed(t, s, id)
}

// TestConsumerDiedMidCallThenTakeoverGets5xx (issue 13, "paid, then
// recorded failed", second case): the consumer dies in the middle of a call
// the provider pays (its context ends, nothing is recorded), and the
// attempts that take over get 503.
func TestConsumerDiedMidCallThenTakeoverGets5xx(t *testing.T) {
	t.Setenv("PAYOUT_TIMEOUT", "500ms")
	s := newStack(t)
	s.provider.Decide(paysThenAnswersLate(time.Second))
	id := s.create(t, "alice")
	s.poll()
	jobs := s.sent.take()
	if len(jobs) != 1 {
		t.Fatalf("poller sent %v", jobs)
	}
	body, _ := json.Marshal(jobs[0])
	payload, _ := json.Marshal(events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", Body: string(body), EventSource: "aws:sqs"}}})
	ctx, die := context.WithCancel(context.Background())
	go func() {
		for {
			if calls, _ := s.provider.Calls(id); calls > 0 {
				die() // the Lambda is gone in the middle of the call
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, _ = s.consumer.Invoke(ctx, payload)
	// SQS delivers the message again (the first delivery never finished):
	// the attempt is not overdue yet, so the job comes back at its deadline.
	s.deliver(t, jobs[0])
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		s.poll()
		if jobs := s.sent.take(); len(jobs) > 0 {
			s.deliver(t, jobs...)
		}
		w, err := s.a.Service.Get(context.Background(), "alice", id)
		if err != nil {
			t.Fatal(err)
		}
		if w.Status.Final() {
			if w.Status != withdrawal.Paid {
				t.Fatalf("the provider paid %s, the ledger says %s (%s)", id, w.Status, w.LastError)
			}
			s.drain(t, "alice", id)
			financeNeverToldFailed(t, s, id)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("withdrawal %s did not settle", id)
}
