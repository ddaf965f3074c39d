package poller_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/poller"
)

// invokeHandler runs the poller Lambda handler on the sample EventBridge event
// for about budget-margin and returns the failures its final log line counts,
// the sum of the PollerFailures values it emitted (-1 if it emitted none) and
// its error.
func invokeHandler(t *testing.T, q *delayq.Queue, d poller.Dispatcher) (logged int, emitted float64, err error) {
	t.Helper()
	const (
		budget = 1300 * time.Millisecond
		margin = time.Second
	)
	payload, rerr := os.ReadFile("../../events/poller-scheduled.json")
	if rerr != nil {
		t.Fatal(rerr)
	}
	var logs, lines syncBuffer
	p := newPoller(t, poller.Config{
		Queues: poller.Static(q), Dispatcher: d, Clock: clock.System{}, Ack: true, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: metrics.New(&lines, clock.System{}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	_, err = lambda.NewHandler(p.Handler(margin)).Invoke(ctx, payload)

	logged = -1
	for sc := bufio.NewScanner(strings.NewReader(logs.String())); sc.Scan(); {
		var l struct {
			Msg      string `json:"msg"`
			Failures int    `json:"failures"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "poller invocation done" {
			logged = l.Failures
		}
	}
	if logged < 0 {
		t.Fatalf("no invocation log line; logs:\n%s", logs.String())
	}
	emitted = -1
	for sc := bufio.NewScanner(strings.NewReader(lines.String())); sc.Scan(); {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		if v, ok := l[metrics.PollerFailures].(float64); ok {
			emitted = max(emitted, 0) + v
		}
	}
	return logged, emitted, err
}

// A poller invocation whose rounds fail (Redis gone, Redis refusing our
// AUTH, the work queue refusing every job) fails, so Lambda's Errors metric
// counts it, and emits PollerFailures with the number of failed rounds; it
// still polled until its margin (more than one round).
func TestHandlerFailsWhenRoundsFail(t *testing.T) {
	all := func(delayq.Job) bool { return true }
	cases := []struct {
		name  string
		setup func(t *testing.T) (*delayq.Queue, poller.Dispatcher)
	}{
		{"redis down", func(t *testing.T) (*delayq.Queue, poller.Dispatcher) {
			s := newRedis(t)
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			s.Kill()
			return newQueue(t, rdb, 2), &recorder{}
		}},
		{"wrong AUTH", func(t *testing.T) (*delayq.Queue, poller.Dispatcher) {
			s := newRedis(t)
			if err := s.Client(t).ConfigSet(context.Background(), "requirepass", "the-right-one").Err(); err != nil {
				t.Fatal(err)
			}
			rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: "a-stale-one"})
			t.Cleanup(func() { _ = rdb.Close() })
			return newQueue(t, rdb, 2), &recorder{}
		}},
		{"work queue refusing", func(t *testing.T) (*delayq.Queue, poller.Dispatcher) {
			q := newQueue(t, newRedis(t).Client(t), 2)
			addJobs(t, q, time.Now(), jobIDs("f", 20)...)
			return q, &recorder{refuse: all, err: errors.New("sqs: AccessDenied")}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, d := tc.setup(t)
			logged, emitted, err := invokeHandler(t, q, d)
			if err == nil {
				t.Fatal("the invocation succeeded although its rounds failed")
			}
			if !strings.Contains(err.Error(), "rounds failed") {
				t.Errorf("error %q is not the summary", err)
			}
			if logged < 1 || emitted != float64(logged) {
				t.Fatalf("%d failed rounds logged, PollerFailures emitted %v; want the same count, at least 1", logged, emitted)
			}
			t.Logf("%d failed rounds: %v", logged, err)
		})
	}
}

// A clean invocation returns no error and emits PollerFailures 0, so the
// alarm on it sees data, not silence.
func TestHandlerCleanInvocationEmitsZeroFailures(t *testing.T) {
	q := newQueue(t, newRedis(t).Client(t), 2)
	addJobs(t, q, time.Now(), jobIDs("c", 20)...)
	d := &recorder{}
	logged, emitted, err := invokeHandler(t, q, d)
	if err != nil || logged != 0 || emitted != 0 {
		t.Fatalf("invoke: %v, %d failures logged, PollerFailures %v; want nil, 0, 0", err, logged, emitted)
	}
	if d.count() != 20 {
		t.Fatalf("%d jobs dispatched, want 20", d.count())
	}
}

// hung is a dispatcher that never answers until its context ends.
type hung struct{ deadline chan bool }

func (h hung) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	_, ok := ctx.Deadline()
	h.deadline <- ok
	<-ctx.Done()
	return jobs, ctx.Err()
}

// A dispatch that hangs is cut off at Run's until, so the invocation ends
// within its margin; the job it held is re-scheduled, not lost, and a cut at
// the very end is not a failure (the next invocation sends the job).
func TestHungDispatchEndsAtUntilAndLosesNothing(t *testing.T) {
	q := newQueue(t, newRedis(t).Client(t), 1)
	addJobs(t, q, time.Now(), "stuck")
	h := hung{deadline: make(chan bool, 10)}
	p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: h, Clock: clock.System{}, Ack: true,
		RetryDelay: time.Millisecond})
	done := make(chan poller.Totals, 1)
	go func() { done <- p.Run(context.Background(), time.Now().Add(200*time.Millisecond)) }()
	var tot poller.Totals
	select {
	case tot = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return: the dispatch is not bounded by until")
	}
	if !<-h.deadline {
		t.Error("the dispatcher got no deadline")
	}
	if tot.Claimed != 1 || tot.Refused != 1 || tot.Failures != 0 {
		t.Fatalf("totals %+v; want the job claimed and refused, no failure", tot)
	}
	if st := stats(t, q, time.Now().Add(time.Second)); st.Due != 1 || st.Inflight != 0 {
		t.Fatalf("queue %+v: want the job due again, not leased", st)
	}
	d := &recorder{}
	p2 := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: d, Clock: clock.NewFake(time.Now().Add(time.Second)), Ack: true})
	if r := round(t, p2); r.Claimed != 1 || d.ids()[0] != "stuck" {
		t.Fatalf("next round %+v dispatched %v", r, d.ids())
	}
}

// The SQS dispatcher against an SQS that reads the request and never
// answers: the round ends after the call timeout with a timeout error, and
// the job is back in the due set, unacked.
func TestRoundWithHungSQSTimesOutAndKeepsTheJob(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	t.Cleanup(func() { close(release); srv.Close() })
	api := sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	})
	d, err := dispatch.NewSQS(api, "https://sqs.us-east-1.amazonaws.com/123456789012/work", dispatch.WithCallTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, newRedis(t).Client(t), 1)
	clk := clock.NewFake(t0)
	addJobs(t, q, t0, "j1")
	p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: d, Clock: clk, Ack: true, RetryDelay: time.Second})
	type res struct {
		r   poller.RoundResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := p.Round(context.Background())
		done <- res{r, err}
	}()
	var got res
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the round did not end: the SQS call has no timeout")
	}
	if got.err != nil || !errors.Is(got.r.DispatchErr, context.DeadlineExceeded) || got.r.Refused != 1 {
		t.Fatalf("round %+v, %v; want the job refused with a timeout", got.r, got.err)
	}
	if st := stats(t, q, t0.Add(time.Second)); st.Due != 1 || st.DueNow != 1 || st.Inflight != 0 {
		t.Fatalf("queue %+v: want the job due again a second later, not leased", st)
	}
}
