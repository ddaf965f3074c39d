package localstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/localstack"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// delivery is one message as the handler saw it.
type delivery struct {
	MsgID    string
	Job      delayq.Job
	Receives int
	// Start and End bound the handler call that carried it.
	Start, End time.Time
}

// sink is a BatchHandler that records every delivery. fail picks the
// messages to report failed; batchErr, if it returns non-nil, fails the whole
// batch as a Lambda error; hold, if set, is called first with the batch.
type sink struct {
	fail     func(j delayq.Job, receives int) bool
	batchErr func(j delayq.Job, receives int) error
	hold     func(ev events.SQSEvent)

	mu         sync.Mutex
	deliveries []delivery
	batchSizes []int
	bad        []string
}

func (s *sink) handle(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	start := time.Now()
	if s.hold != nil {
		s.hold(ev)
	}
	resp := events.SQSEventResponse{}
	var got []delivery
	var err error
	for _, m := range ev.Records {
		var j delayq.Job
		if uerr := json.Unmarshal([]byte(m.Body), &j); uerr != nil {
			s.note("undecodable body " + m.Body)
		}
		n, cerr := strconv.Atoi(m.Attributes["ApproximateReceiveCount"])
		if cerr != nil || n < 1 {
			s.note("bad ApproximateReceiveCount " + m.Attributes["ApproximateReceiveCount"])
		}
		if m.EventSource != "aws:sqs" {
			s.note("event source " + m.EventSource)
		}
		got = append(got, delivery{MsgID: m.MessageId, Job: j, Receives: n, Start: start})
		if s.fail != nil && s.fail(j, n) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
		if s.batchErr != nil && err == nil {
			err = s.batchErr(j, n)
		}
	}
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range got {
		d.End = end
		s.deliveries = append(s.deliveries, d)
	}
	s.batchSizes = append(s.batchSizes, len(ev.Records))
	return resp, err
}

func (s *sink) note(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bad = append(s.bad, msg)
}

func (s *sink) all() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.deliveries)
}

func (s *sink) of(id string) []delivery {
	var out []delivery
	for _, d := range s.all() {
		if d.Job.ID == id {
			out = append(out, d)
		}
	}
	return out
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries)
}

// check reports malformed messages and batches over 10.
func (s *sink) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.bad {
		t.Errorf("malformed message: %s", b)
	}
	for _, n := range s.batchSizes {
		if n < 1 || n > 10 {
			t.Errorf("a batch of %d messages: want 1..10", n)
		}
	}
}

// kills records the jobs sent to the dead set.
type kills struct {
	mu   sync.Mutex
	jobs []delayq.Job
}

func (k *kills) kill(_ context.Context, j delayq.Job) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.jobs = append(k.jobs, j)
	return nil
}

func (k *kills) all() []delayq.Job {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.jobs)
}

// newWorkQueue returns a stopped WorkQueue and its Close, which the test may
// call and which runs at cleanup anyway (WorkQueue.Close must run once).
func newWorkQueue(t *testing.T, cfg localstack.WorkQueueConfig) (*localstack.WorkQueue, func()) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = quiet
	}
	q := localstack.NewWorkQueue(cfg)
	var once sync.Once
	closeQ := func() { once.Do(q.Close) }
	t.Cleanup(closeQ)
	return q, closeQ
}

func job(id string, lease int64) delayq.Job {
	return delayq.Job{Kind: "withdrawal.payout", Queue: "withdrawals", Shard: 0, ID: id, Due: 1795948200000, Lease: lease}
}

func dispatch(t *testing.T, q *localstack.WorkQueue, jobs ...delayq.Job) {
	t.Helper()
	refused, err := q.Dispatch(context.Background(), jobs)
	if err != nil || len(refused) != 0 {
		t.Fatalf("dispatch refused %d jobs: %v", len(refused), err)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Jobs dispatched concurrently, before and after Start, are all handled,
// once each, in batches of at most ten.
func TestWorkQueueHandlesEveryJobInBatchesOfAtMostTen(t *testing.T) {
	const (
		dispatchers = 8
		perWorker   = 125
		jobs        = dispatchers * perWorker
	)
	var s sink
	q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{Handler: s.handle, Workers: 4, Visibility: time.Second})
	dispatch(t, q, job("early-1", 1), job("early-2", 1))
	q.Start()
	var wg sync.WaitGroup
	errs := make(chan error, dispatchers)
	for w := range dispatchers {
		wg.Go(func() {
			for i := 0; i < perWorker; {
				n := min(1+(w*7+i)%37, perWorker-i) // chunks of 1..37, not aligned on 10
				chunk := make([]delayq.Job, n)
				for k := range chunk {
					chunk[k] = job(fmt.Sprintf("w%d-%03d", w, i+k), int64(1000+w))
				}
				if refused, err := q.Dispatch(context.Background(), chunk); err != nil || len(refused) > 0 {
					errs <- fmt.Errorf("dispatch refused %d: %v", len(refused), err)
					return
				}
				_ = q.Len() // read concurrently with dispatches and deliveries
				i += n
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every job handled", func() bool { return s.count() >= jobs+2 })
	closeQ()

	s.check(t)
	seen := map[string]int{}
	for _, d := range s.all() {
		seen[d.Job.ID]++
		if d.Receives != 1 {
			t.Errorf("%s delivered with receive count %d, want 1 (it never failed)", d.Job.ID, d.Receives)
		}
	}
	if len(seen) != jobs+2 {
		t.Fatalf("%d distinct jobs handled, want %d", len(seen), jobs+2)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s handled %d times, want once", id, n)
		}
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d messages left waiting", n)
	}
}

// A message that fails is hidden for Visibility, then delivered again as the
// same message with a higher receive count, until it succeeds.
func TestWorkQueueRedeliversAFailedMessageAfterVisibility(t *testing.T) {
	const visibility = 50 * time.Millisecond
	s := sink{fail: func(j delayq.Job, receives int) bool { return j.ID == "flaky" && receives < 3 }}
	var k kills
	q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{Handler: s.handle, Kill: k.kill, Visibility: visibility, MaxReceives: 5, Workers: 2})
	q.Start()
	dispatch(t, q, job("flaky", 7), job("steady", 7))
	waitFor(t, 10*time.Second, "the third delivery", func() bool { return len(s.of("flaky")) == 3 })
	time.Sleep(4 * visibility) // room for a wrong fourth delivery
	closeQ()

	s.check(t)
	got := s.of("flaky")
	receives := make([]int, len(got))
	for i, d := range got {
		receives[i] = d.Receives
		if d.MsgID != got[0].MsgID {
			t.Errorf("delivery %d is message %s, want the same message %s", i+1, d.MsgID, got[0].MsgID)
		}
		if d.Job != job("flaky", 7) {
			t.Errorf("delivery %d carries %+v", i+1, d.Job)
		}
		if i > 0 {
			if gap := d.Start.Sub(got[i-1].End); gap < visibility {
				t.Errorf("delivery %d came %s after the failure, before the visibility timeout (%s)", i+1, gap, visibility)
			}
		}
	}
	if diff := cmp.Diff([]int{1, 2, 3}, receives); diff != "" {
		t.Fatalf("receive counts (-want +got):\n%s", diff)
	}
	if n := len(s.of("steady")); n != 1 {
		t.Fatalf("the job that succeeded was delivered %d times", n)
	}
	if kj := k.all(); len(kj) != 0 {
		t.Fatalf("killed %v", kj)
	}
	if n := q.Len(); n != 0 {
		t.Fatalf("%d messages left", n)
	}
}

// A message failing MaxReceives deliveries goes to Kill once, with its lease,
// and is never delivered again; a Lambda error fails the whole batch.
func TestWorkQueueKillsAfterMaxReceives(t *testing.T) {
	const (
		visibility  = 20 * time.Millisecond
		maxReceives = 3
	)
	poison := func(j delayq.Job, _ int) bool { return j.ID == "poison" }
	cases := []struct {
		name string
		s    *sink
	}{
		{"reported failure", &sink{fail: poison}},
		{"handler error fails the batch", &sink{batchErr: func(j delayq.Job, n int) error {
			if poison(j, n) {
				return errors.New("lambda: runtime exited")
			}
			return nil
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var k kills
			q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{
				Handler: tc.s.handle, Kill: k.kill, Visibility: visibility, MaxReceives: maxReceives, Workers: 2,
			})
			dispatch(t, q, job("poison", 42))
			q.Start()
			waitFor(t, 10*time.Second, "the kill", func() bool { return len(k.all()) > 0 })
			time.Sleep(10 * visibility) // a wrong redelivery would come meanwhile
			closeQ()

			tc.s.check(t)
			if diff := cmp.Diff([]delayq.Job{job("poison", 42)}, k.all()); diff != "" {
				t.Fatalf("killed (-want +got):\n%s", diff)
			}
			var receives []int
			for _, d := range tc.s.of("poison") {
				receives = append(receives, d.Receives)
			}
			if diff := cmp.Diff([]int{1, 2, 3}, receives); diff != "" {
				t.Fatalf("receive counts (-want +got):\n%s", diff)
			}
			if n := q.Len(); n != 0 {
				t.Fatalf("%d messages left after the kill", n)
			}
		})
	}
}

// One message per job: dispatching a job again (its lease expired and it was
// claimed again) while its message waits updates that message's lease.
func TestWorkQueueKeepsOneMessagePerJob(t *testing.T) {
	t.Run("while ready", func(t *testing.T) {
		var s sink
		q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{Handler: s.handle, Visibility: time.Second})
		dispatch(t, q, job("dup", 1), job("other", 1))
		dispatch(t, q, job("dup", 2))
		if n := q.Len(); n != 2 {
			t.Fatalf("%d messages waiting, want 2", n)
		}
		q.Start()
		waitFor(t, 10*time.Second, "the deliveries", func() bool { return s.count() >= 2 })
		time.Sleep(100 * time.Millisecond)
		closeQ()
		got := s.of("dup")
		if len(got) != 1 || got[0].Job.Lease != 2 {
			t.Fatalf("deliveries of the job: %+v, want one, under lease 2", got)
		}
	})

	t.Run("while hidden", func(t *testing.T) {
		const visibility = 300 * time.Millisecond
		s := sink{fail: func(j delayq.Job, _ int) bool { return j.Lease == 1 }}
		q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{Handler: s.handle, Visibility: visibility})
		dispatch(t, q, job("dup", 1))
		q.Start()
		waitFor(t, 10*time.Second, "the failed delivery", func() bool { return s.count() == 1 })
		waitFor(t, 10*time.Second, "the message to be hidden", func() bool { return q.Len() == 1 })
		dispatch(t, q, job("dup", 2))
		if n := q.Len(); n != 1 {
			t.Fatalf("%d messages waiting, want 1", n)
		}
		waitFor(t, 10*time.Second, "the redelivery", func() bool { return s.count() == 2 })
		time.Sleep(2 * visibility)
		closeQ()
		got := s.of("dup")
		if len(got) != 2 || got[0].Job.Lease != 1 || got[1].Job.Lease != 2 {
			t.Fatalf("deliveries: %+v, want lease 1 (failed) then lease 2", got)
		}
	})

	t.Run("while delivered", func(t *testing.T) {
		// The first delivery is under way when the job comes again; it then
		// fails. The newer message supersedes it: no redelivery of lease 1.
		const visibility = 50 * time.Millisecond
		inFirst := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		s := sink{
			fail: func(j delayq.Job, _ int) bool { return j.Lease == 1 },
			hold: func(ev events.SQSEvent) {
				if len(ev.Records) > 0 && ev.Records[0].Attributes["ApproximateReceiveCount"] == "1" {
					var j delayq.Job
					_ = json.Unmarshal([]byte(ev.Records[0].Body), &j)
					if j.Lease == 1 {
						once.Do(func() { close(inFirst) })
						<-release
					}
				}
			},
		}
		// One worker: the newer message waits until the first delivery ends.
		q, closeQ := newWorkQueue(t, localstack.WorkQueueConfig{Handler: s.handle, Visibility: visibility, Workers: 1})
		dispatch(t, q, job("dup", 1))
		q.Start()
		select {
		case <-inFirst:
		case <-time.After(10 * time.Second):
			t.Fatal("first delivery never started")
		}
		dispatch(t, q, job("dup", 2))
		if n := q.Len(); n != 1 {
			t.Fatalf("%d messages waiting, want the newer one", n)
		}
		close(release)
		waitFor(t, 10*time.Second, "the newer delivery", func() bool { return len(s.of("dup")) == 2 })
		time.Sleep(6 * visibility)
		closeQ()
		var leases []int64
		for _, d := range s.of("dup") {
			leases = append(leases, d.Job.Lease)
		}
		if diff := cmp.Diff([]int64{1, 2}, leases); diff != "" {
			t.Fatalf("leases delivered, in order (-want +got):\n%s", diff)
		}
	})
}

// Close lets the batch under way finish, delivers what is ready, refuses new
// jobs from the moment it is called, and returns only then.
func TestWorkQueueCloseFinishesWorkUnderWay(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s := sink{hold: func(events.SQSEvent) {
		once.Do(func() {
			close(started)
			<-release
		})
	}}
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // a failing test must not leave the worker blocked
	q := localstack.NewWorkQueue(localstack.WorkQueueConfig{Handler: s.handle, Workers: 1, Visibility: time.Second, Log: quiet})
	q.Start()
	var accepted []string
	for i := range 5 {
		dispatch(t, q, job(fmt.Sprintf("first-%d", i), 1))
		accepted = append(accepted, fmt.Sprintf("first-%d", i))
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch started")
	}
	// The one worker is busy: these wait, ready.
	for i := range 25 {
		dispatch(t, q, job(fmt.Sprintf("ready-%02d", i), 1))
		accepted = append(accepted, fmt.Sprintf("ready-%02d", i))
	}

	closed := make(chan struct{})
	go func() {
		q.Close()
		close(closed)
	}()
	// Until Close has begun, dispatches are accepted (and must be delivered);
	// from then on they are refused.
	var refusedAt int
	for i := 0; ; i++ {
		id := fmt.Sprintf("probe-%04d", i)
		refused, err := q.Dispatch(context.Background(), []delayq.Job{job(id, 1)})
		if len(refused) == 1 {
			if err == nil {
				t.Error("a refusal without an error")
			}
			refusedAt = i
			break
		}
		accepted = append(accepted, id)
		if i > 100_000 {
			t.Fatal("Close never began refusing dispatches")
		}
		time.Sleep(100 * time.Microsecond)
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a batch was still under way")
	case <-time.After(100 * time.Millisecond):
	}
	free()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the batch finished")
	}

	s.check(t)
	var handled []string
	for _, d := range s.all() {
		handled = append(handled, d.Job.ID)
	}
	slices.Sort(handled)
	slices.Sort(accepted)
	if diff := cmp.Diff(accepted, handled); diff != "" {
		t.Fatalf("handled vs accepted before Close (-accepted +handled):\n%s", diff)
	}
	if refused, err := q.Dispatch(context.Background(), []delayq.Job{job("late", 1), job("later", 1)}); err == nil || len(refused) != 2 {
		t.Fatalf("dispatch after Close: refused %d, error %v; want both refused with an error", len(refused), err)
	}
	t.Logf("%d probes accepted before Close began refusing", refusedAt)
}
