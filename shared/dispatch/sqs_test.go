package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/sqsfake"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
)

const testQueueURL = sqsfake.QueueURL

// The poller's contract, declared there identically.
var _ interface {
	Dispatch(ctx context.Context, jobs []delayq.Job) (refused []delayq.Job, err error)
} = (*dispatch.SQS)(nil)

var _ dispatch.SQSSender = (*sqs.Client)(nil)

func makeJobs(n int) []delayq.Job {
	jobs := make([]delayq.Job, n)
	for i := range jobs {
		jobs[i] = delayq.Job{
			Kind: "withdrawal.payout", Queue: "withdrawals", Shard: i % 4,
			ID: fmt.Sprintf("job-%03d", i), Due: 1_790_000_000_000 + int64(i), Lease: 1_790_000_030_000,
		}
	}
	return jobs
}

func newDispatcher(t testing.TB, api dispatch.SQSSender, opts ...dispatch.Option) *dispatch.SQS {
	t.Helper()
	d, err := dispatch.NewSQS(api, testQueueURL, opts...)
	if err != nil {
		t.Fatalf("NewSQS: %v", err)
	}
	return d
}

func marshal(t testing.TB, j delayq.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDispatchSendsBatchesOfTen(t *testing.T) {
	srv := sqsfake.New(t)
	d := newDispatcher(t, srv.Client())
	jobs := makeJobs(25)
	// Bodies must be exactly json.Marshal's, escapes included.
	jobs[3].ID = `<a&b>"q"\ é ` + "\u2028\x01"
	jobs[7].Kind = "seckill.order"
	jobs[7].Lease = 0

	refused, err := d.Dispatch(context.Background(), jobs)
	if err != nil || len(refused) != 0 {
		t.Fatalf("Dispatch = %v, %v; want nothing refused", refused, err)
	}

	index := map[string]int{}
	for i, j := range jobs {
		index[marshal(t, j)] = i
	}
	reqs := srv.Requests()
	var sizes []int
	seen := map[int]bool{}
	for _, req := range reqs {
		sizes = append(sizes, len(req.Entries))
		if req.QueueUrl != testQueueURL {
			t.Errorf("QueueUrl = %q", req.QueueUrl)
		}
		batch := -1
		for _, e := range req.Entries {
			i, ok := index[e.MessageBody]
			if !ok {
				t.Fatalf("body %q is no job's json.Marshal", e.MessageBody)
			}
			if batch == -1 {
				batch = i / dispatch.BatchSize
			}
			if i/dispatch.BatchSize != batch {
				t.Errorf("job %d sent with batch %d", i, batch)
			}
			if want := strconv.Itoa(i % dispatch.BatchSize); e.Id != want {
				t.Errorf("job %d: entry id %q, want %q", i, e.Id, want)
			}
			wantAttrs := map[string]sqsfake.Attr{"kind": {DataType: "String", StringValue: jobs[i].Kind}}
			if diff := cmp.Diff(wantAttrs, e.MessageAttributes); diff != "" {
				t.Errorf("job %d attributes (-want +got):\n%s", i, diff)
			}
			if e.DelaySeconds != nil {
				t.Errorf("job %d: DelaySeconds set", i)
			}
			seen[i] = true
		}
	}
	slices.Sort(sizes)
	if diff := cmp.Diff([]int{5, 10, 10}, sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	if len(seen) != len(jobs) {
		t.Errorf("%d distinct jobs sent, want %d", len(seen), len(jobs))
	}
}

func TestDispatchRefusesFailedEntries(t *testing.T) {
	srv := sqsfake.New(t)
	srv.Decide = func(_ int, id string) bool {
		n, _ := strconv.Atoi(id)
		return n%2 == 1
	}
	d := newDispatcher(t, srv.Client())
	jobs := makeJobs(25)

	refused, err := d.Dispatch(context.Background(), jobs)
	var want []delayq.Job
	for i, j := range jobs {
		if i%2 == 0 { // batch offsets are multiples of 10, so even ids are even jobs
			want = append(want, j)
		}
	}
	if diff := cmp.Diff(want, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if err == nil || !strings.Contains(err.Error(), "entry refused by test server") {
		t.Errorf("err = %v, want the entry failure", err)
	}
}

func TestDispatchWholeCallFailureRefusesOnlyItsBatch(t *testing.T) {
	srv := sqsfake.New(t)
	srv.Fail = func(_ int, entries []sqsfake.Entry) bool {
		return strings.Contains(entries[0].MessageBody, `"id":"job-010"`)
	}
	d := newDispatcher(t, srv.Client())
	jobs := makeJobs(25)

	refused, err := d.Dispatch(context.Background(), jobs)
	if diff := cmp.Diff(jobs[10:20], refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InternalError" {
		t.Errorf("err = %v, want an InternalError API error", err)
	}
	if got := srv.Calls.Load(); got != 3 {
		t.Errorf("%d calls, want 3: the other batches proceed", got)
	}
}

func TestDispatchBoundsConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []dispatch.Option
		jobs int
		max  int64
	}{
		{"three", []dispatch.Option{dispatch.WithConcurrency(3)}, 200, 3},
		{"one", []dispatch.Option{dispatch.WithConcurrency(1)}, 50, 1},
		{"default", nil, 400, dispatch.DefaultConcurrency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := sqsfake.New(t)
			srv.Hold = 30 * time.Millisecond
			d := newDispatcher(t, srv.Client(), tc.opts...)

			refused, err := d.Dispatch(context.Background(), makeJobs(tc.jobs))
			if err != nil || len(refused) != 0 {
				t.Fatalf("Dispatch = %d refused, %v", len(refused), err)
			}
			if got, want := srv.Calls.Load(), int64((tc.jobs+9)/10); got != want {
				t.Errorf("%d calls, want %d", got, want)
			}
			got := srv.MaxInFlight.Load()
			if got > tc.max {
				t.Errorf("%d calls at once, limit %d", got, tc.max)
			}
			if tc.max > 1 && got < 2 {
				t.Errorf("%d calls at once: batches were not sent in parallel", got)
			}
		})
	}
}

func TestDispatchEmpty(t *testing.T) {
	srv := sqsfake.New(t)
	d := newDispatcher(t, srv.Client())
	for _, jobs := range [][]delayq.Job{nil, {}} {
		refused, err := d.Dispatch(context.Background(), jobs)
		if refused != nil || err != nil {
			t.Errorf("Dispatch(%v) = %v, %v; want nil, nil", jobs, refused, err)
		}
	}
	if n := srv.Calls.Load(); n != 0 {
		t.Errorf("%d calls for nothing", n)
	}
}

func TestDispatchCancelledContextRefusesAll(t *testing.T) {
	srv := sqsfake.New(t)
	d := newDispatcher(t, srv.Client())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	jobs := makeJobs(25)

	refused, err := d.Dispatch(ctx, jobs)
	if diff := cmp.Diff(jobs, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// fakeSender answers with a crafted output, to reach cases a sane server
// never produces.
type fakeSender struct {
	respond func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error)

	mu     sync.Mutex
	inputs []*sqs.SendMessageBatchInput
}

func (f *fakeSender) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	f.inputs = append(f.inputs, in)
	f.mu.Unlock()
	return f.respond(in)
}

func ok(id string) types.SendMessageBatchResultEntry {
	return types.SendMessageBatchResultEntry{Id: &id}
}

func failed(id string) types.BatchResultErrorEntry {
	code := "InternalError"
	return types.BatchResultErrorEntry{Id: &id, Code: &code}
}

func TestDispatchIsConservative(t *testing.T) {
	jobs := makeJobs(5)
	for _, tc := range []struct {
		name    string
		out     *sqs.SendMessageBatchOutput
		refused []int
	}{
		{"missing entries", &sqs.SendMessageBatchOutput{
			Successful: []types.SendMessageBatchResultEntry{ok("0"), ok("2"), ok("4")},
		}, []int{1, 3}},
		{"listed as both", &sqs.SendMessageBatchOutput{
			Successful: []types.SendMessageBatchResultEntry{ok("0"), ok("1"), ok("2"), ok("3"), ok("4")},
			Failed:     []types.BatchResultErrorEntry{failed("1")},
		}, []int{1}},
		{"unknown ids", &sqs.SendMessageBatchOutput{
			Successful: []types.SendMessageBatchResultEntry{ok("0"), ok("7"), ok("x"), ok("-1"), {}},
		}, []int{1, 2, 3, 4}},
		{"empty output", &sqs.SendMessageBatchOutput{}, []int{0, 1, 2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeSender{respond: func(*sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				return tc.out, nil
			}}
			refused, err := newDispatcher(t, f).Dispatch(context.Background(), jobs)
			var want []delayq.Job
			for _, i := range tc.refused {
				want = append(want, jobs[i])
			}
			if diff := cmp.Diff(want, refused); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
			if err == nil {
				t.Error("err = nil, want a reason")
			}
		})
	}
}

func TestDispatchRefusesInvalidJobsAlone(t *testing.T) {
	f := &fakeSender{respond: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			out.Successful = append(out.Successful, ok(*e.Id))
		}
		return out, nil
	}}
	jobs := makeJobs(12)
	jobs[2].Kind = ""
	jobs[11].Shard = -1

	refused, err := newDispatcher(t, f).Dispatch(context.Background(), jobs)
	if diff := cmp.Diff([]delayq.Job{jobs[2], jobs[11]}, refused); diff != "" {
		t.Errorf("refused (-want +got):\n%s", diff)
	}
	if !errors.Is(err, dispatch.ErrInvalidJob) {
		t.Errorf("err = %v, want ErrInvalidJob", err)
	}
	// The second batch held one valid job; the invalid one was never sent.
	var ids [][]string
	for _, in := range f.inputs {
		var batch []string
		for _, e := range in.Entries {
			batch = append(batch, *e.Id)
		}
		ids = append(ids, batch)
	}
	slices.SortFunc(ids, func(a, b []string) int { return len(b) - len(a) })
	want := [][]string{{"0", "1", "3", "4", "5", "6", "7", "8", "9"}, {"0"}}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("entry ids sent (-want +got):\n%s", diff)
	}
}

func TestNewSQSRejectsBadConfig(t *testing.T) {
	f := &fakeSender{}
	for _, tc := range []struct {
		name string
		api  dispatch.SQSSender
		url  string
		opts []dispatch.Option
	}{
		{"nil client", nil, testQueueURL, nil},
		{"empty url", f, "", nil},
		{"zero concurrency", f, testQueueURL, []dispatch.Option{dispatch.WithConcurrency(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := dispatch.NewSQS(tc.api, tc.url, tc.opts...); err == nil {
				t.Error("NewSQS succeeded")
			}
		})
	}
}

const benchJobs = 500 // the poller's default claim batch

func BenchmarkDispatchSQS(b *testing.B) {
	srv := sqsfake.New(b)
	d := newDispatcher(b, srv.Client())
	benchmarkDispatch(b, d)
}

// BenchmarkDispatchFreeSink measures the adapter alone, without the SDK.
func BenchmarkDispatchFreeSink(b *testing.B) {
	out := &sqs.SendMessageBatchOutput{}
	for i := range dispatch.BatchSize {
		out.Successful = append(out.Successful, ok(strconv.Itoa(i)))
	}
	d := newDispatcher(b, sinkSender{out})
	benchmarkDispatch(b, d)
}

type sinkSender struct{ out *sqs.SendMessageBatchOutput }

func (s sinkSender) SendMessageBatch(context.Context, *sqs.SendMessageBatchInput, ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return s.out, nil
}

func benchmarkDispatch(b *testing.B, d *dispatch.SQS) {
	jobs := makeJobs(benchJobs)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if refused, err := d.Dispatch(ctx, jobs); err != nil || len(refused) != 0 {
			b.Fatalf("Dispatch = %d refused, %v", len(refused), err)
		}
	}
	b.ReportMetric(float64(b.N*benchJobs)/b.Elapsed().Seconds(), "jobs/s")
}
