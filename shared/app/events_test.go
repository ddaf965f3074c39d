package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/seckill"
)

// handlerDispatcher hands jobs to the consumer's handler as SQS messages,
// as the local stack's work queue does.
type handlerDispatcher struct{ h *consumer.Handler }

func (d handlerDispatcher) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	ev := events.SQSEvent{}
	for i, j := range jobs {
		body, _ := json.Marshal(j)
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

// TestEventsQueueIsPolledAndDelivered: the App's poller drains the flash
// sale's events queue (on every shard: HOURGLASS_QUEUE_SHARDS), its
// consumer publishes the event (as a JSON log line locally) and acks it.
func TestEventsQueueIsPolledAndDelivered(t *testing.T) {
	s := redistest.Start(t)
	t.Setenv("REDIS_URL", s.URL())
	t.Setenv("HOURGLASS_QUEUE_SHARDS", "2")
	cfg, err := config.Load(config.Local)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	var logs syncBuffer
	a, err := app.New(cfg, app.NewLogger(&logs, cfg.SlogLevel()), rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	job := "phone|ev|payment.refund_required|1795946400000|9.99|CNY|evt_late|pu_01KB0000000000000000000000|1|0|alice"
	due := time.Now().Add(-time.Second).UnixMilli()
	if err := rdb.ZAdd(ctx, "hg:{dq:"+seckill.EventsQueue+":1}:due", redis.Z{Score: float64(due), Member: job}).Err(); err != nil {
		t.Fatal(err)
	}
	qs, err := a.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, q := range qs {
		names[q.Name()] = q.Shards()
	}
	if names[seckill.EventsQueue] != 2 {
		t.Fatalf("queues polled %v, want %s over 2 shards", names, seckill.EventsQueue)
	}
	p, err := a.Poller(handlerDispatcher{a.Consumer(nil, true)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := p.Round(ctx); err != nil || r.Claimed != 1 {
		t.Fatalf("round: %+v %v, want the event claimed", r, err)
	}
	if out := logs.String(); !strings.Contains(out, `"msg":"order event"`) || !strings.Contains(out, `"payment_event_id":"evt_late"`) ||
		!strings.Contains(out, `"item_id":"phone"`) {
		t.Fatalf("logs:\n%s\nwant the refund's order event of phone", out)
	}
	for _, q := range qs {
		if st, err := q.Stats(ctx, time.Now()); err != nil || st != (delayq.Stats{}) {
			t.Fatalf("queue %s after delivery: %+v %v", q.Name(), st, err)
		}
	}
}
