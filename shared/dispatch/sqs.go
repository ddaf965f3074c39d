// Package dispatch carries claimed jobs to the work queue (SQS) and back out of
// its messages.
//
// SQS satisfies the poller's dispatcher contract:
//
//	// Dispatch hands jobs on to the work queue. It returns the jobs that were NOT accepted
//	// (the poller re-schedules them); every other job was accepted. err, if not nil, describes
//	// what went wrong (for logs); refused is authoritative either way.
//	Dispatch(ctx context.Context, jobs []delayq.Job) (refused []delayq.Job, err error)
//
// A message body is exactly json.Marshal(job); DecodeJob reads it back.
package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/hourglass/hourglass/shared/delayq"
)

// BatchSize is the most entries SQS takes in one SendMessageBatch call.
const BatchSize = 10

// DefaultConcurrency is the default number of SendMessageBatch calls in flight.
const DefaultConcurrency = 16

// DefaultCallTimeout bounds one SendMessageBatch call, its SDK retries
// included: SQS answers in milliseconds, and a hung call must fail while the
// poller still has time to re-schedule the batch.
const DefaultCallTimeout = 5 * time.Second

// KindAttribute is the message attribute carrying the job kind, so queue
// subscribers and filters can route without parsing bodies.
const KindAttribute = "kind"

// maxErrs bounds the errors kept per Dispatch: a dead queue fails every batch,
// and one line per batch helps nobody.
const maxErrs = 5

// entryIDs are the batch entry ids, shared so that no id is allocated per job.
var entryIDs = [BatchSize]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// SQSSender is the part of *sqs.Client the dispatcher uses.
type SQSSender interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Option configures NewSQS.
type Option func(*SQS)

// WithConcurrency bounds the SendMessageBatch calls in flight at once.
func WithConcurrency(n int) Option { return func(s *SQS) { s.concurrency = n } }

// WithCallTimeout bounds each SendMessageBatch call (DefaultCallTimeout).
// The caller's context still ends a call sooner.
func WithCallTimeout(d time.Duration) Option { return func(s *SQS) { s.callTimeout = d } }

// SQS dispatches jobs to one SQS queue.
type SQS struct {
	api         SQSSender
	queueURL    string
	concurrency int
	callTimeout time.Duration
}

// NewSQS returns a dispatcher sending to the queue at queueURL through api.
func NewSQS(api SQSSender, queueURL string, opts ...Option) (*SQS, error) {
	s := &SQS{api: api, queueURL: queueURL, concurrency: DefaultConcurrency, callTimeout: DefaultCallTimeout}
	for _, o := range opts {
		o(s)
	}
	switch {
	case api == nil:
		return nil, errors.New("dispatch: SQS client is nil")
	case queueURL == "":
		return nil, errors.New("dispatch: SQS queue URL is empty")
	case s.concurrency < 1:
		return nil, fmt.Errorf("dispatch: concurrency %d is below 1", s.concurrency)
	case s.callTimeout <= 0:
		return nil, fmt.Errorf("dispatch: call timeout %s is not positive", s.callTimeout)
	}
	return s, nil
}

// Dispatch sends jobs in batches of BatchSize, up to the configured number of
// calls at once. A batch's failure refuses only that batch's jobs.
func (s *SQS) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	n := (len(jobs) + BatchSize - 1) / BatchSize
	// accepted[b] has bit i set when job i of batch b was accepted; each
	// worker writes only its own batches' slots.
	accepted := make([]uint16, n)
	errs := make([]error, n)

	var next atomic.Int64
	work := func() {
		for {
			b := int(next.Add(1) - 1)
			if b >= n {
				return
			}
			lo := b * BatchSize
			hi := min(lo+BatchSize, len(jobs))
			accepted[b], errs[b] = s.send(ctx, jobs[lo:hi])
		}
	}
	workers := min(s.concurrency, n)
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()

	var refused []delayq.Job
	var kept []error
	failed := 0
	for b, mask := range accepted {
		lo := b * BatchSize
		hi := min(lo+BatchSize, len(jobs))
		for i := range hi - lo {
			if mask&(1<<i) == 0 {
				refused = append(refused, jobs[lo+i])
			}
		}
		if errs[b] != nil {
			failed++
			if len(kept) < maxErrs {
				kept = append(kept, fmt.Errorf("batch %d: %w", b, errs[b]))
			}
		}
	}
	if failed == 0 && len(refused) == 0 {
		return nil, nil
	}
	err := errors.Join(kept...)
	if err == nil {
		// Unreachable unless send's bookkeeping is wrong; keep refused honest.
		err = errors.New("jobs missing from the SQS response")
	}
	return refused, fmt.Errorf("dispatch: %d of %d jobs refused (%d of %d batches with errors): %w",
		len(refused), len(jobs), failed, n, err)
}

// send sends one batch and returns the mask of the accepted jobs.
func (s *SQS) send(ctx context.Context, batch []delayq.Job) (uint16, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var (
		buf     bytes.Buffer
		enc     = json.NewEncoder(&buf)
		ends    [BatchSize]int
		valid   uint16
		badJobs []error
	)
	buf.Grow(len(batch) * 128)
	for i := range batch {
		start := buf.Len()
		err := validate(&batch[i])
		if err == nil {
			// Encode writes json.Marshal's bytes plus a newline, or nothing.
			err = enc.Encode(&batch[i])
		}
		if err != nil {
			buf.Truncate(start)
			badJobs = append(badJobs, fmt.Errorf("job %q: %w", batch[i].ID, err))
		} else {
			valid |= 1 << i
		}
		ends[i] = buf.Len()
	}
	badErr := errors.Join(badJobs...)
	if valid == 0 {
		return 0, badErr
	}

	// One string for the whole batch; bodies are slices of it.
	all := buf.String()
	var (
		bodies  [BatchSize]string
		entries = make([]types.SendMessageBatchRequestEntry, 0, len(batch))
		attrs   map[string]types.MessageAttributeValue
		attrFor string
	)
	for i := range batch {
		if valid&(1<<i) == 0 {
			continue
		}
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		bodies[i] = all[start : ends[i]-1] // without the newline
		kind := batch[i].Kind
		if attrs == nil || kind != attrFor {
			// Entries of one kind share their (read-only) attribute map.
			attrs = map[string]types.MessageAttributeValue{
				KindAttribute: {DataType: &stringType, StringValue: &batch[i].Kind},
			}
			attrFor = kind
		}
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id:                &entryIDs[i],
			MessageBody:       &bodies[i],
			MessageAttributes: attrs,
		})
	}

	// A call that times out may still have been accepted: its jobs count
	// as refused and are sent again later, which the consumer tolerates.
	callCtx, cancel := context.WithTimeout(ctx, s.callTimeout)
	defer cancel()
	out, err := s.api.SendMessageBatch(callCtx, &sqs.SendMessageBatchInput{QueueUrl: &s.queueURL, Entries: entries})
	if err != nil {
		if callCtx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s: %w", s.callTimeout, err)
		}
		return 0, errors.Join(fmt.Errorf("send batch of %d: %w", len(entries), err), badErr)
	}
	var ok, failed uint16
	for _, e := range out.Successful {
		if i, found := entryIndex(e.Id, len(batch)); found {
			ok |= 1 << i
		}
	}
	var failedErr, missingErr error
	for _, e := range out.Failed {
		if i, found := entryIndex(e.Id, len(batch)); found {
			failed |= 1 << i
		}
		if failedErr == nil {
			failedErr = fmt.Errorf("%d of %d entries failed, first: entry %s: %s (sender fault %t): %s",
				len(out.Failed), len(entries), deref(e.Id), deref(e.Code), e.SenderFault, deref(e.Message))
		}
	}
	// Only ids we sent count, and an entry listed as failed is failed even
	// if it is also listed as successful.
	ok &= valid &^ failed
	if missing := valid &^ ok &^ failed; missing != 0 {
		missingErr = fmt.Errorf("%d of %d entries missing from the response", bits.OnesCount16(missing), len(entries))
	}
	return ok, errors.Join(failedErr, missingErr, badErr)
}

var stringType = "String"

func entryIndex(id *string, n int) (int, bool) {
	if id == nil {
		return 0, false
	}
	i, err := strconv.Atoi(*id)
	if err != nil || i < 0 || i >= n {
		return 0, false
	}
	return i, true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
