// Package consumer is the work-queue side: it takes a batch of job messages
// (an SQS event, or the local stand-in's imitation of one), runs each job by
// its kind, and reports the messages to deliver again.
package consumer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// JobFunc runs one job. nil means done with; an error means deliver again.
type JobFunc func(ctx context.Context, job delayq.Job) error

// Acker finishes a job's lease once it is done with (the local stand-in; in
// AWS the poller acks when SQS accepts the message).
type Acker func(ctx context.Context, job delayq.Job) error

// Config configures a Handler.
type Config struct {
	// Jobs maps a job kind to the function that runs it.
	Jobs   map[string]JobFunc
	Ack    Acker
	Logger *slog.Logger
	// Metrics, if set, receives ConsumerLagMs (job start - due time) per batch.
	Metrics *metrics.Emitter
	Clock   clock.Clock
}

// Handler handles batches of job messages.
type Handler struct {
	cfg Config
}

// New returns a Handler.
func New(cfg Config) *Handler {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	return &Handler{cfg: cfg}
}

// Handle runs every message of the batch concurrently and reports the ones
// that failed, so that only they are delivered again (ReportBatchItemFailures).
func (h *Handler) Handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		resp = events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		lag  metrics.Sample
	)
	for _, m := range ev.Records {
		wg.Go(func() {
			if err := h.one(ctx, m, &lag); err != nil {
				mu.Lock()
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	h.cfg.Metrics.Emit(nil, metrics.Value{Name: metrics.ConsumerLagMs, Unit: metrics.Milliseconds, Values: lag.Take()})
	return resp, nil
}

func (h *Handler) one(ctx context.Context, m events.SQSMessage, lag *metrics.Sample) error {
	log := h.cfg.Logger.With("message_id", m.MessageId)
	job, err := dispatch.DecodeJob(m.Body)
	if err != nil {
		log.Error("undecodable job message", "error", err.Error())
		return err
	}
	log = log.With("kind", job.Kind, "queue", job.Queue, "shard", job.Shard, "job_id", job.ID)
	lag.Add(float64(h.cfg.Clock.Now().UnixMilli() - job.Due))
	run, ok := h.cfg.Jobs[job.Kind]
	if !ok {
		log.Error("no handler for job kind")
		return fmt.Errorf("consumer: unknown job kind %q", job.Kind)
	}
	// The job names its record only; the job's function reads the record
	// and records the create's request id in ctx for these lines too.
	ctx = correlation.Track(ctx)
	err = run(ctx, job)
	log = correlation.Logger(log, correlation.ID(ctx))
	if err != nil {
		log.Error("job failed, delivering again later", "error", err.Error())
		return err
	}
	if h.cfg.Ack != nil && job.Lease != 0 {
		if err := h.cfg.Ack(ctx, job); err != nil {
			// The job is done; its lease will expire and the duplicate delivery
			// that follows finds it done.
			log.Warn("ack failed", "error", err.Error())
		}
	}
	return nil
}

// Withdrawals returns the JobFunc of withdrawal payout jobs.
func Withdrawals(p *withdrawal.Processor) JobFunc {
	return func(ctx context.Context, job delayq.Job) error {
		if job.Queue != withdrawal.QueueName {
			return fmt.Errorf("consumer: payout job from queue %q", job.Queue)
		}
		var claimed time.Time
		if job.Due > 0 {
			claimed = time.UnixMilli(job.Due).UTC()
		}
		return p.ProcessClaimed(ctx, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, claimed)
	}
}

// Orders returns the JobFunc of flash-sale order jobs: those of an item's
// order queue, and those of the events queue.
func Orders(p *seckill.OrderProcessor) JobFunc {
	return func(ctx context.Context, job delayq.Job) error {
		if job.Queue == seckill.EventsQueue {
			return p.ProcessEvent(ctx, job.ID)
		}
		item, ok := strings.CutPrefix(job.Queue, seckill.QueuePrefix)
		if !ok || !seckill.ValidItemID(item) {
			return fmt.Errorf("consumer: order job from queue %q", job.Queue)
		}
		return p.Process(ctx, item, job.Shard, job.ID)
	}
}
