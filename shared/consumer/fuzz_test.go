package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
)

// FuzzConsumerEvent runs whatever JSON the Lambda runtime could hand the
// consumer: an undecodable event is an invoke error (Lambda retries the
// batch), and a decoded one reports exactly the messages that could not be
// done, by their ids, without running a job twice or a malformed one at all.
func FuzzConsumerEvent(f *testing.F) {
	for _, name := range []string{"consumer-sqs", "consumer-sqs-order"} {
		raw, err := os.ReadFile("../../events/" + name + ".json")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"Records":[{"messageId":"a","body":"{\"kind\":\"k\",\"queue\":\"q\",\"shard\":0,\"id\":\"fail\",\"due_ms\":0}"},{"messageId":"b","body":"nope"}]}`))
	f.Add([]byte(`{"Records":[{"messageId":"a","body":"{\"kind\":\"other\",\"queue\":\"q\",\"shard\":0,\"id\":\"x\",\"due_ms\":0,\"lease\":5}"}]}`))
	f.Add([]byte(`{"Records":null}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		var (
			mu  sync.Mutex
			ran = map[string]int{}
		)
		run := func(_ context.Context, job delayq.Job) error {
			mu.Lock()
			ran[job.ID]++
			mu.Unlock()
			if strings.Contains(job.ID, "fail") {
				return errors.New("job failed")
			}
			return nil
		}
		acked := 0
		h := consumer.New(consumer.Config{
			Jobs:   map[string]consumer.JobFunc{"withdrawal.payout": run, "seckill.order": run, "k": run},
			Logger: quiet,
			Ack: func(context.Context, delayq.Job) error {
				mu.Lock()
				acked++
				mu.Unlock()
				return nil
			},
		})
		out, err := lambda.NewHandler(h.Handle).Invoke(context.Background(), payload)
		// The Lambda library reads the first JSON value of the payload.
		var ev events.SQSEvent
		if json.NewDecoder(bytes.NewReader(payload)).Decode(&ev) != nil {
			if err == nil {
				t.Fatalf("undecodable event answered %s", out)
			}
			return
		}
		if err != nil {
			t.Fatalf("decodable event: invoke error %v", err)
		}
		var resp events.SQSEventResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatalf("response %s: %v", out, err)
		}
		failed := map[string]int{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier]++
		}
		wantRuns := map[string]int{}
		wantFailed := map[string]int{}
		for _, r := range ev.Records {
			job, err := dispatch.DecodeJob(r.Body)
			switch {
			case err != nil:
				wantFailed[r.MessageId]++
			case job.Kind != "withdrawal.payout" && job.Kind != "seckill.order" && job.Kind != "k":
				wantFailed[r.MessageId]++
			default:
				wantRuns[job.ID]++
				if strings.Contains(job.ID, "fail") {
					wantFailed[r.MessageId]++
				}
			}
		}
		if !equalCounts(failed, wantFailed) {
			t.Fatalf("failures %v, want %v", failed, wantFailed)
		}
		if !equalCounts(ran, wantRuns) {
			t.Fatalf("jobs run %v, want %v", ran, wantRuns)
		}
	})
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
