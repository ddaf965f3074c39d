package sqsfake

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Invoker runs a function on one event: a lambda.Handler in process, or a
// function under the runtime interface emulator.
type Invoker interface {
	Invoke(ctx context.Context, payload []byte) ([]byte, error)
}

// EventSource delivers a Server's queue to a function as Lambda's SQS event
// source mapping does with ReportBatchItemFailures: batches of up to
// BatchSize; a failed invocation leaves the whole batch to come back after
// Visibility; otherwise the messages the response lists as failed come back
// and the rest are deleted. A message received MaxReceives times that fails
// again moves to the dead-letter list (SQS's redrive policy).
type EventSource struct {
	Queue    *Server
	Function Invoker
	// BatchSize defaults to 10, Visibility to 1s, MaxReceives to 10,
	// Concurrency (batches in flight at once) to 1.
	BatchSize   int
	Visibility  time.Duration
	MaxReceives int
	Concurrency int

	// Invocations, FailedInvocations (an error, or a response that cannot be
	// read), ItemFailures (messages reported failed) and Redelivered
	// (deliveries after the first) count what happened.
	Invocations       atomic.Int64
	FailedInvocations atomic.Int64
	ItemFailures      atomic.Int64
	Redelivered       atomic.Int64

	mu   sync.Mutex
	dead []events.SQSMessage
}

func (e *EventSource) defaults() {
	if e.BatchSize <= 0 {
		e.BatchSize = 10
	}
	if e.Visibility <= 0 {
		e.Visibility = time.Second
	}
	if e.MaxReceives <= 0 {
		e.MaxReceives = 10
	}
	if e.Concurrency <= 0 {
		e.Concurrency = 1
	}
}

// Poll delivers one batch, if any message is visible, and reports how many
// messages it delivered.
func (e *EventSource) Poll(ctx context.Context) (int, error) {
	e.defaults()
	batch := e.Queue.Receive(e.BatchSize, e.Visibility)
	if len(batch) == 0 {
		return 0, nil
	}
	for _, m := range batch {
		if m.Attributes["ApproximateReceiveCount"] != "1" {
			e.Redelivered.Add(1)
		}
	}
	payload, err := json.Marshal(events.SQSEvent{Records: batch})
	if err != nil {
		return 0, err
	}
	e.Invocations.Add(1)
	out, err := e.Function.Invoke(ctx, payload)
	failed, err := failures(batch, out, err)
	if err != nil {
		e.FailedInvocations.Add(1)
	}
	e.ItemFailures.Add(int64(len(failed)))
	var done, dead []string
	for _, m := range batch {
		if !failed[m.MessageId] {
			done = append(done, m.MessageId)
		} else if receives(m) >= e.MaxReceives {
			dead = append(dead, m.MessageId)
			e.mu.Lock()
			e.dead = append(e.dead, m)
			e.mu.Unlock()
		}
	}
	e.Queue.Delete(append(done, dead...)...)
	return len(batch), err
}

// failures returns the batch's messages to deliver again: all of them when
// the invocation failed or its response names a message not in the batch.
func failures(batch []events.SQSMessage, out []byte, err error) (map[string]bool, error) {
	all := func() map[string]bool {
		m := make(map[string]bool, len(batch))
		for _, msg := range batch {
			m[msg.MessageId] = true
		}
		return m
	}
	if err != nil {
		return all(), fmt.Errorf("sqsfake: invocation failed: %w", err)
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return all(), fmt.Errorf("sqsfake: response %q: %w", out, err)
	}
	inBatch := all()
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		if !inBatch[f.ItemIdentifier] {
			return all(), fmt.Errorf("sqsfake: response names unknown message %q", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, nil
}

func receives(m events.SQSMessage) int {
	n, _ := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
	return n
}

// Run delivers batches, Concurrency at a time, until ctx is done. Failed
// invocations are not errors of Run: they are what redelivery is for.
func (e *EventSource) Run(ctx context.Context) {
	e.defaults()
	var wg sync.WaitGroup
	for range e.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, _ := e.Poll(ctx)
				if n == 0 {
					select {
					case <-ctx.Done():
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
		})
	}
	wg.Wait()
}

// Dead returns the messages moved to the dead-letter list.
func (e *EventSource) Dead() []events.SQSMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]events.SQSMessage(nil), e.dead...)
}
