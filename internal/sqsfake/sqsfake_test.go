package sqsfake_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hourglass/hourglass/internal/sqsfake"
)

// send sends bodies through a real SDK client, one batch.
func send(t *testing.T, s *sqsfake.Server, bodies ...string) {
	t.Helper()
	var entries []types.SendMessageBatchRequestEntry
	for i, b := range bodies {
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(b),
			MessageAttributes: map[string]types.MessageAttributeValue{"kind": {DataType: aws.String("String"), StringValue: aws.String("test")}},
		})
	}
	out, err := s.Client().SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(sqsfake.QueueURL), Entries: entries})
	if err != nil || len(out.Failed) > 0 {
		t.Fatalf("SendMessageBatch: %+v, %v", out, err)
	}
}

// function answers each event as script says: fail lists the bodies to
// report failed; err fails the whole invocation.
type function struct {
	mu     sync.Mutex
	events []events.SQSEvent
	fail   func(body string, receive string) bool
	err    error
}

func (f *function) Invoke(_ context.Context, payload []byte) ([]byte, error) {
	var ev events.SQSEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.events = append(f.events, ev)
	f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
	for _, m := range ev.Records {
		if f.fail != nil && f.fail(m.Body, m.Attributes["ApproximateReceiveCount"]) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	return json.Marshal(resp)
}

func TestEventSourceRedeliversOnlyFailedMessages(t *testing.T) {
	s := sqsfake.New(t)
	send(t, s, "a", "b", "c")
	fn := &function{fail: func(body, receive string) bool { return body == "b" && receive == "1" }}
	es := &sqsfake.EventSource{Queue: s, Function: fn, Visibility: 50 * time.Millisecond}

	if n, err := es.Poll(context.Background()); n != 3 || err != nil {
		t.Fatalf("first poll: %d, %v", n, err)
	}
	if n, _ := es.Poll(context.Background()); n != 0 {
		t.Fatalf("the failed message came back before its visibility timeout: %d", n)
	}
	time.Sleep(60 * time.Millisecond)
	if n, err := es.Poll(context.Background()); n != 1 || err != nil {
		t.Fatalf("second poll: %d, %v", n, err)
	}
	if s.Len() != 0 {
		t.Fatalf("%d messages left", s.Len())
	}
	second := fn.events[1].Records[0]
	if second.Body != "b" || second.Attributes["ApproximateReceiveCount"] != "2" || second.EventSource != "aws:sqs" ||
		*second.MessageAttributes["kind"].StringValue != "test" {
		t.Fatalf("redelivery %+v", second)
	}
	if es.ItemFailures.Load() != 1 || es.Redelivered.Load() != 1 || es.Invocations.Load() != 2 {
		t.Fatalf("counters: %d failures, %d redelivered, %d invocations", es.ItemFailures.Load(), es.Redelivered.Load(), es.Invocations.Load())
	}
}

func TestEventSourceFailedInvocationRedeliversTheBatchThenDeadLetters(t *testing.T) {
	s := sqsfake.New(t)
	send(t, s, "x", "y")
	fn := &function{err: errors.New("boom")}
	es := &sqsfake.EventSource{Queue: s, Function: fn, Visibility: time.Millisecond, MaxReceives: 3}
	for range 3 {
		if _, err := es.Poll(context.Background()); err == nil {
			t.Fatal("a failed invocation went unreported")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var dead []string
	for _, m := range es.Dead() {
		dead = append(dead, m.Body)
	}
	slices.Sort(dead)
	if !slices.Equal(dead, []string{"x", "y"}) || s.Len() != 0 || es.FailedInvocations.Load() != 3 {
		t.Fatalf("dead %v, %d queued, %d failed invocations; want both dead after 3 receives", dead, s.Len(), es.FailedInvocations.Load())
	}
}

func TestEventSourceUnknownFailureIDFailsTheBatch(t *testing.T) {
	s := sqsfake.New(t)
	send(t, s, "a", "b")
	es := &sqsfake.EventSource{Queue: s, Visibility: time.Hour,
		Function: invoker(func([]byte) ([]byte, error) {
			return []byte(`{"batchItemFailures":[{"itemIdentifier":"not-in-the-batch"}]}`), nil
		})}
	if _, err := es.Poll(context.Background()); err == nil || s.Len() != 2 {
		t.Fatalf("err %v, %d queued; want the whole batch kept", err, s.Len())
	}
}

type invoker func([]byte) ([]byte, error)

func (f invoker) Invoke(_ context.Context, p []byte) ([]byte, error) { return f(p) }

// TestSendMessageAndAttributes: a real SDK client's SendMessage joins the
// queue (its checksum checked by the client), and GetQueueAttributes
// answers what the test set.
func TestSendMessageAndAttributes(t *testing.T) {
	s := sqsfake.New(t)
	s.Attributes = map[string]string{"VisibilityTimeout": "270", "RedrivePolicy": `{"maxReceiveCount":5}`}
	ctx := context.Background()
	out, err := s.Client().SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(sqsfake.QueueURL), MessageBody: aws.String(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Receive(10, time.Minute)
	if len(got) != 1 || got[0].Body != `{"x":1}` || got[0].MessageId != aws.ToString(out.MessageId) {
		t.Fatalf("queued %+v after SendMessage answered %q", got, aws.ToString(out.MessageId))
	}
	if reqs := s.Requests(); len(reqs) != 1 || reqs[0].Entries[0].MessageBody != `{"x":1}` {
		t.Fatalf("requests %+v", reqs)
	}
	attrs, err := s.Client().GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(sqsfake.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameVisibilityTimeout}})
	if err != nil {
		t.Fatal(err)
	}
	if len(attrs.Attributes) != 1 || attrs.Attributes["VisibilityTimeout"] != "270" {
		t.Fatalf("attributes %v", attrs.Attributes)
	}
}
