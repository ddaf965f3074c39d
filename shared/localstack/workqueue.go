package localstack

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/delayq"
)

// BatchHandler is an SQS-triggered Lambda handler.
type BatchHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// WorkQueueConfig configures a WorkQueue.
type WorkQueueConfig struct {
	Handler BatchHandler
	// Kill moves a job that failed MaxReceives deliveries to its dead set.
	Kill func(ctx context.Context, job delayq.Job) error
	// Visibility is how long a failed message stays hidden before redelivery.
	Visibility time.Duration
	// MaxReceives is how many deliveries a message gets (SQS's maxReceiveCount).
	MaxReceives int
	// Workers is the number of batches handled at once.
	Workers int
	Log     *slog.Logger
}

// WorkQueue is the local stand-in for the SQS work queue: batches of up to 10,
// partial failures delivered again after a visibility timeout, a dead set
// after MaxReceives. It holds nothing Redis does not: every job it holds is
// still leased in its delay queue, and the consumer acks the lease only once
// the job is done, so a killed process loses nothing.
type WorkQueue struct {
	cfg WorkQueueConfig

	mu      sync.Mutex
	wake    chan struct{}
	stop    chan struct{}
	ready   []*message
	waiting map[string]*message // ready or hidden, by job key: one message per job
	seq     uint64
	closed  bool
	wg      sync.WaitGroup
	stopped sync.Once
}

type message struct {
	id        string
	key       string
	job       delayq.Job
	receives  int
	visibleAt time.Time
	hidden    bool
}

// batchSize is SQS's largest Lambda batch in this design.
const batchSize = 10

var errClosed = errors.New("localstack: work queue is shutting down")

// NewWorkQueue returns a stopped WorkQueue; Start starts it.
func NewWorkQueue(cfg WorkQueueConfig) *WorkQueue {
	if cfg.Workers < 1 {
		cfg.Workers = 4
	}
	if cfg.MaxReceives < 1 {
		cfg.MaxReceives = 10
	}
	cfg.Log = cmp.Or(cfg.Log, slog.Default())
	return &WorkQueue{cfg: cfg, wake: make(chan struct{}, 1), stop: make(chan struct{}), waiting: map[string]*message{}}
}

func jobKey(j delayq.Job) string { return j.Queue + "\x00" + strconv.Itoa(j.Shard) + "\x00" + j.ID }

// Dispatch implements poller.Dispatcher. A job already waiting here (its
// lease expired and it was claimed again) keeps one message, under the newer
// lease.
func (q *WorkQueue) Dispatch(_ context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return jobs, errClosed
	}
	for _, j := range jobs {
		k := jobKey(j)
		if m, ok := q.waiting[k]; ok {
			m.job = j
			continue
		}
		q.seq++
		m := &message{id: "local-" + strconv.FormatUint(q.seq, 10), key: k, job: j}
		q.waiting[k] = m
		q.ready = append(q.ready, m)
	}
	q.signal()
	return nil, nil
}

func (q *WorkQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Start starts the workers.
func (q *WorkQueue) Start() {
	for range q.cfg.Workers {
		q.wg.Go(q.work)
	}
}

// Close stops taking jobs, delivers what is ready, and returns once every
// batch under way has finished. Hidden messages are left to their leases.
// Calling it again waits the same way.
func (q *WorkQueue) Close() {
	q.stopped.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.mu.Unlock()
		close(q.stop)
	})
	q.wg.Wait()
}

// Len is the number of messages waiting (ready or hidden).
func (q *WorkQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

func (q *WorkQueue) work() {
	for {
		batch, wait, done := q.take()
		if done {
			return
		}
		if len(batch) == 0 {
			t := time.NewTimer(wait)
			select {
			case <-q.wake:
			case <-q.stop:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		q.deliver(batch)
	}
}

// take returns the next batch; or, if none is ready, how long to wait; or
// done once the queue is closed and nothing ready is left.
func (q *WorkQueue) take() ([]*message, time.Duration, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	wait := time.Second
	if !q.closed {
		for _, m := range q.waiting {
			if !m.hidden {
				continue
			}
			if !m.visibleAt.After(now) {
				m.hidden = false
				q.ready = append(q.ready, m)
			} else if d := m.visibleAt.Sub(now); d < wait {
				wait = d
			}
		}
	}
	if len(q.ready) == 0 {
		return nil, wait, q.closed
	}
	n := min(batchSize, len(q.ready))
	batch := append([]*message(nil), q.ready[:n]...)
	q.ready = q.ready[n:]
	if len(q.ready) > 0 {
		q.signal() // more is ready: wake another worker
	}
	for _, m := range batch {
		delete(q.waiting, m.key)
		m.receives++
	}
	return batch, 0, false
}

func (q *WorkQueue) deliver(batch []*message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(batch))}
	byID := make(map[string]*message, len(batch))
	for i, m := range batch {
		body, _ := json.Marshal(m.job)
		ev.Records[i] = events.SQSMessage{
			MessageId:   m.id,
			Body:        string(body),
			EventSource: "aws:sqs",
			Attributes:  map[string]string{"ApproximateReceiveCount": strconv.Itoa(m.receives)},
		}
		byID[m.id] = m
	}
	ctx := context.Background()
	resp, err := q.cfg.Handler(ctx, ev)
	var failed []*message
	if err != nil { // the whole batch failed, as a Lambda error does
		q.cfg.Log.Error("work batch failed", "error", err.Error())
		failed = batch
	} else {
		for _, f := range resp.BatchItemFailures {
			if m, ok := byID[f.ItemIdentifier]; ok {
				failed = append(failed, m)
			}
		}
	}
	for _, m := range failed {
		if m.receives >= q.cfg.MaxReceives {
			q.cfg.Log.Error("job failed every delivery, moved to the dead set",
				"queue", m.job.Queue, "shard", m.job.Shard, "job_id", m.job.ID, "receives", m.receives)
			if q.cfg.Kill != nil {
				if err := q.cfg.Kill(ctx, m.job); err != nil {
					q.cfg.Log.Warn("dead-set move failed", "job_id", m.job.ID, "error", err.Error())
				}
			}
			continue
		}
		q.hide(m)
	}
}

func (q *WorkQueue) hide(m *message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return // its lease brings it back after a restart
	}
	if _, newer := q.waiting[m.key]; newer {
		return // claimed again meanwhile: that message supersedes this one
	}
	m.hidden = true
	m.visibleAt = time.Now().Add(q.cfg.Visibility)
	q.waiting[m.key] = m
	q.signal()
}
