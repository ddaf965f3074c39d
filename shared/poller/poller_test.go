package poller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/poller"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

// quiet is the logger of pollers whose logs no test reads.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is a Dispatcher that remembers what it accepted. refuse, if set,
// picks the jobs it refuses; err is returned with every dispatch.
type recorder struct {
	refuse func(delayq.Job) bool
	err    error
	// dispatched, if set, hears of every call (after it was recorded).
	dispatched func(jobs []delayq.Job)

	mu       sync.Mutex
	accepted []delayq.Job
	calls    int
}

func (r *recorder) Dispatch(_ context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	var refused []delayq.Job
	r.mu.Lock()
	r.calls++
	for _, j := range jobs {
		if r.refuse != nil && r.refuse(j) {
			refused = append(refused, j)
			continue
		}
		r.accepted = append(r.accepted, j)
	}
	r.mu.Unlock()
	if r.dispatched != nil {
		r.dispatched(jobs)
	}
	return refused, r.err
}

func (r *recorder) jobs() []delayq.Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.accepted)
}

func (r *recorder) dispatchCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.accepted)
}

func (r *recorder) ids() []string {
	jobs := r.jobs()
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	sort.Strings(out)
	return out
}

func newRedis(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t)
}

func newQueue(t *testing.T, rdb redis.Cmdable, shards int) *delayq.Queue {
	t.Helper()
	q, err := delayq.New(rdb, delayq.Options{Name: "withdrawals", Kind: "withdrawal.payout", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func newPoller(t *testing.T, cfg poller.Config) *poller.Poller {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	p, err := poller.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// addJobs schedules ids on their shards (ShardFor) at due.
func addJobs(t *testing.T, q *delayq.Queue, due time.Time, ids ...string) {
	t.Helper()
	var g errgroup.Group
	g.SetLimit(32)
	for _, id := range ids {
		g.Go(func() error { return q.Add(context.Background(), q.ShardFor(id), id, due) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

func jobIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	return out
}

func sorted(ids []string) []string {
	out := slices.Clone(ids)
	sort.Strings(out)
	return out
}

func stats(t *testing.T, q *delayq.Queue, now time.Time) delayq.Stats {
	t.Helper()
	st, err := q.Stats(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func round(t *testing.T, p *poller.Poller) poller.RoundResult {
	t.Helper()
	r, err := p.Round(context.Background())
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	return r
}

// waitFor polls cond until it holds or the generous limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runInBackground runs p until the test stops it (or ends) and returns the
// stop function, which waits for Run to return and gives its totals.
func runInBackground(t *testing.T, p *poller.Poller, until time.Time) func() poller.Totals {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan poller.Totals, 1)
	go func() { done <- p.Run(ctx, until) }()
	var (
		once sync.Once
		tot  poller.Totals
	)
	stop := func() poller.Totals {
		once.Do(func() {
			cancel()
			select {
			case tot = <-done:
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of its context being cancelled")
			}
		})
		return tot
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A poller that claims and then dies (never acks) loses nothing: once the
// lease runs out the next round of any poller returns the jobs and dispatches
// them again.
func TestJobsOfACrashedPollerComeBackAfterTheLease(t *testing.T) {
	const lease = 30 * time.Second
	crashes := []struct {
		name string
		// claim takes the jobs under a lease and never acks them; it returns
		// the lease token.
		claim func(t *testing.T, q *delayq.Queue, clk *clock.Fake) int64
	}{
		{"poller without ack", func(t *testing.T, q *delayq.Queue, clk *clock.Fake) int64 {
			var token int64
			d := &recorder{dispatched: func(jobs []delayq.Job) { token = jobs[0].Lease }}
			p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: d, Clock: clk, Lease: lease, Ack: false})
			if r := round(t, p); r.Claimed != 20 {
				t.Fatalf("crashing poller claimed %d, want 20", r.Claimed)
			}
			return token
		}},
		{"claim with the queue directly", func(t *testing.T, q *delayq.Queue, clk *clock.Fake) int64 {
			c, err := q.Claim(context.Background(), 0, clk.Now(), lease, delayq.MaxBatch)
			if err != nil || len(c.Jobs) != 20 {
				t.Fatalf("claim: %d jobs, %v", len(c.Jobs), err)
			}
			return c.Lease
		}},
	}
	for _, crash := range crashes {
		t.Run(crash.name, func(t *testing.T) {
			ctx := context.Background()
			q := newQueue(t, newRedis(t).Client(t), 1)
			clk := clock.NewFake(t0)
			ids := jobIDs("j", 20)
			addJobs(t, q, t0, ids...)

			stale := crash.claim(t, q, clk)
			if st := stats(t, q, clk.Now()); st != (delayq.Stats{Inflight: 20}) {
				t.Fatalf("after the crash: %+v, want 20 inflight", st)
			}

			d := &recorder{}
			p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: d, Clock: clk, Lease: lease, Ack: true})
			clk.Set(t0.Add(lease - time.Millisecond))
			if r := round(t, p); r.Claimed != 0 || r.Reaped != 0 {
				t.Fatalf("within the lease: %+v, want nothing claimed or reaped", r)
			}
			clk.Set(t0.Add(lease))
			r := round(t, p)
			if r.Reaped != 20 || r.Claimed != 20 {
				t.Fatalf("after the lease: %+v, want 20 reaped and claimed", r)
			}
			if diff := cmp.Diff(ids, d.ids()); diff != "" {
				t.Fatalf("dispatched again (-want +got):\n%s", diff)
			}
			for _, j := range d.jobs() {
				if j.Lease != t0.Add(2*lease).UnixMilli() || j.Lease == stale {
					t.Fatalf("job %s redispatched under lease %d, want a new one (%d)", j.ID, j.Lease, t0.Add(2*lease).UnixMilli())
				}
			}
			if st := stats(t, q, clk.Now()); st != (delayq.Stats{}) {
				t.Fatalf("after the recovery round: %+v, want an empty queue", st)
			}
			// The dead poller's late ack, if it ever came, finds nothing.
			if n, err := q.Ack(ctx, 0, stale, ids...); err != nil || n != 0 {
				t.Fatalf("stale ack acked %d (%v)", n, err)
			}
		})
	}
}

// Four pollers over one 4-shard queue drain 10,000 due jobs together: every
// job is dispatched exactly once and the queue ends empty.
func TestConcurrentPollersDispatchEveryJobOnce(t *testing.T) {
	const (
		jobs    = 10_000
		pollers = 4
	)
	srv := newRedis(t)
	ids := jobIDs("c", jobs)
	addJobs(t, newQueue(t, srv.Client(t), 4), time.Now(), ids...)

	recs := make([]*recorder, pollers)
	stops := make([]func() poller.Totals, pollers)
	for i := range pollers {
		recs[i] = &recorder{}
		// Each poller has its own client and queue value, as separate
		// processes would.
		q := newQueue(t, srv.Client(t), 4)
		p := newPoller(t, poller.Config{
			Queues: poller.Static(q), Dispatcher: recs[i], Clock: clock.System{},
			Batch: 50, Ack: true, Interval: 20 * time.Millisecond,
		})
		stops[i] = runInBackground(t, p, time.Time{})
	}
	total := func() int {
		n := 0
		for _, r := range recs {
			n += r.count()
		}
		return n
	}
	waitFor(t, 60*time.Second, "10,000 dispatches", func() bool { return total() >= jobs })

	var sum poller.Totals
	for i, stop := range stops {
		tot := stop()
		t.Logf("poller %d: %d rounds, %d claimed, %d dispatch calls", i, tot.Rounds, tot.Claimed, recs[i].dispatchCalls())
		sum.Claimed += tot.Claimed
		sum.Refused += tot.Refused
		sum.Reaped += tot.Reaped
		sum.Failures += tot.Failures
	}
	if sum.Claimed != jobs || sum.Refused != 0 || sum.Reaped != 0 || sum.Failures != 0 {
		t.Errorf("totals over pollers %+v, want %d claimed and nothing else", sum, jobs)
	}

	seen := make(map[string]int, jobs)
	check := newQueue(t, srv.Client(t), 4)
	for _, r := range recs {
		for _, j := range r.jobs() {
			seen[j.ID]++
			if j.Shard != check.ShardFor(j.ID) || j.Lease <= j.Due {
				t.Errorf("job %+v: wrong shard or lease", j)
			}
		}
	}
	var twice, lost []string
	for _, id := range ids {
		switch seen[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			twice = append(twice, id)
		}
	}
	if len(lost) > 0 || len(twice) > 0 || len(seen) != jobs {
		t.Fatalf("%d jobs never dispatched (first: %q), %d dispatched more than once (first: %q), %d distinct",
			len(lost), lost[:min(5, len(lost))], len(twice), twice[:min(5, len(twice))], len(seen))
	}
	if st := stats(t, check, time.Now()); st != (delayq.Stats{}) {
		t.Fatalf("queue after the run: %+v, want all zero", st)
	}
}

// Jobs the dispatcher refuses are not acked: they wait RetryDelay in the due
// set and a later round dispatches them. A failing dispatcher loses nothing.
func TestRefusedJobsAreRescheduledAfterRetryDelay(t *testing.T) {
	const retryDelay = 5 * time.Second
	odd := func(j delayq.Job) bool { return (j.ID[len(j.ID)-1]-'0')%2 == 1 }
	cases := []struct {
		name    string
		ack     bool
		refuse  func(delayq.Job) bool
		err     error
		refused int
	}{
		{"some refused, poller acks", true, odd, nil, 5},
		{"some refused, consumer acks", false, odd, nil, 5},
		{"dispatcher error refuses all", true, func(delayq.Job) bool { return true }, errors.New("sqs: service unavailable"), 10},
		{"dispatcher error refuses all, consumer acks", false, func(delayq.Job) bool { return true }, errors.New("sqs: service unavailable"), 10},
		{"error with a partial refusal: refused is authoritative", true, odd, errors.New("sqs: 5 entries failed"), 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := newRedis(t).Client(t)
			q := newQueue(t, rdb, 1)
			clk := clock.NewFake(t0)
			ids := jobIDs("r", 10)
			addJobs(t, q, t0, ids...)

			d := &recorder{refuse: tc.refuse, err: tc.err}
			p := newPoller(t, poller.Config{
				Queues: poller.Static(q), Dispatcher: d, Clock: clk, Ack: tc.ack, RetryDelay: retryDelay,
			})
			r, err := p.Round(ctx)
			if err != nil {
				t.Fatalf("a dispatcher's refusal must not fail the round: %v", err)
			}
			if r.Claimed != 10 || r.Refused != tc.refused {
				t.Fatalf("round: %+v, want 10 claimed, %d refused", r, tc.refused)
			}
			var refusedIDs, acceptedIDs []string
			for _, id := range ids {
				if tc.refuse(delayq.Job{ID: id}) {
					refusedIDs = append(refusedIDs, id)
				} else {
					acceptedIDs = append(acceptedIDs, id)
				}
			}
			if diff := cmp.Diff(acceptedIDs, d.ids(), cmpEmpty); diff != "" {
				t.Fatalf("accepted (-want +got):\n%s", diff)
			}
			// Refused: back in the due set at now+RetryDelay, out of the lease.
			keys := q.Keys(0)
			for _, id := range refusedIDs {
				due, err := rdb.ZScore(ctx, keys.Due, id).Result()
				if err != nil || int64(due) != t0.Add(retryDelay).UnixMilli() {
					t.Fatalf("refused %s due at %v (%v), want %d", id, due, err, t0.Add(retryDelay).UnixMilli())
				}
				if err := rdb.ZScore(ctx, keys.Inflight, id).Err(); !errors.Is(err, redis.Nil) {
					t.Fatalf("refused %s still leased (%v)", id, err)
				}
			}
			wantInflight := int64(0)
			if !tc.ack {
				wantInflight = int64(len(acceptedIDs)) // the consumer acks those
			}
			want := delayq.Stats{Due: int64(len(refusedIDs)), Inflight: wantInflight}
			if diff := cmp.Diff(want, stats(t, q, t0)); diff != "" {
				t.Fatalf("stats after the round (-want +got):\n%s", diff)
			}

			// Not before RetryDelay; then a healthy dispatcher gets exactly them.
			healthy := &recorder{}
			p2 := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: healthy, Clock: clk, Ack: true, RetryDelay: retryDelay})
			clk.Set(t0.Add(retryDelay - time.Millisecond))
			if r := round(t, p2); r.Claimed != 0 {
				t.Fatalf("claimed %d before RetryDelay", r.Claimed)
			}
			clk.Set(t0.Add(retryDelay))
			if r := round(t, p2); r.Claimed != len(refusedIDs) {
				t.Fatalf("later round claimed %d, want %d", r.Claimed, len(refusedIDs))
			}
			if diff := cmp.Diff(refusedIDs, healthy.ids()); diff != "" {
				t.Fatalf("dispatched by the later round (-want +got):\n%s", diff)
			}
			if got := d.count() + healthy.count(); got != 10 {
				t.Fatalf("%d dispatches in all, want each of the 10 jobs once", got)
			}
		})
	}
}

var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || slices.Equal(a, b) })

func TestRoundReportsNextAndMore(t *testing.T) {
	type add struct {
		shard int
		n     int
		at    time.Duration
	}
	cases := []struct {
		name   string
		shards int
		batch  int
		adds   []add
		// want is the result of each successive round at t0.
		want []poller.RoundResult
	}{
		{
			name: "empty queue", shards: 1, batch: 5,
			want: []poller.RoundResult{{}},
		},
		{
			name: "full batches go on, up to ChainedBatches of them", shards: 1, batch: 5,
			adds: []add{{0, 7, 0}, {0, 1, 10 * time.Second}},
			want: []poller.RoundResult{
				{Claimed: 7, Next: t0.Add(10 * time.Second)},
				{Next: t0.Add(10 * time.Second)},
			},
		},
		{
			name: "past ChainedBatches full batches, More says the rest comes next", shards: 1, batch: 2,
			adds: []add{{0, 2*poller.ChainedBatches + 1, 0}, {0, 1, 10 * time.Second}},
			want: []poller.RoundResult{
				{Claimed: 2 * poller.ChainedBatches, More: true, Next: t0},
				{Claimed: 1, Next: t0.Add(10 * time.Second)},
				{Next: t0.Add(10 * time.Second)},
			},
		},
		{
			name: "exactly one batch", shards: 1, batch: 5,
			adds: []add{{0, 5, -time.Second}},
			want: []poller.RoundResult{
				{Claimed: 5},
				{},
			},
		},
		{
			name: "Next is the earliest over shards, More if any shard is full", shards: 3, batch: 4,
			adds: []add{{0, 1, 10 * time.Second}, {1, 1, 3 * time.Second}, {2, 4*poller.ChainedBatches + 2, 0}, {2, 1, 7 * time.Second}},
			want: []poller.RoundResult{
				{Claimed: 4 * poller.ChainedBatches, More: true, Next: t0},
				{Claimed: 2, Next: t0.Add(3 * time.Second)},
			},
		},
		{
			name: "future jobs only", shards: 2, batch: 5,
			adds: []add{{0, 3, 150 * time.Millisecond}, {1, 1, time.Hour}},
			want: []poller.RoundResult{{Next: t0.Add(150 * time.Millisecond)}},
		},
	}
	srv := newRedis(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := delayq.New(srv.Client(t), delayq.Options{
				Prefix: fmt.Sprintf("t%d:", i), Name: "withdrawals", Kind: "withdrawal.payout", Shards: tc.shards,
			})
			if err != nil {
				t.Fatal(err)
			}
			for ai, a := range tc.adds {
				for k := range a.n {
					if err := q.Add(ctx, a.shard, fmt.Sprintf("a%d-%d", ai, k), t0.Add(a.at)); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: &recorder{}, Clock: clock.NewFake(t0), Batch: tc.batch, Ack: true})
			for n, want := range tc.want {
				got := round(t, p)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("round %d (-want +got):\n%s", n+1, diff)
				}
			}
		})
	}
}

// claimTimes records, through OnClaim, when each job was handed over.
type claimTimes struct {
	mu sync.Mutex
	at map[string]time.Time
	// due holds each job's due time as the queue reported it, unix ms.
	due map[string]int64
}

func newClaimTimes() *claimTimes {
	return &claimTimes{at: map[string]time.Time{}, due: map[string]int64{}}
}

func (c *claimTimes) record(jobs []delayq.Job, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, j := range jobs {
		if _, again := c.at[j.ID]; !again {
			c.at[j.ID] = at
			c.due[j.ID] = j.Due
		}
	}
}

func (c *claimTimes) get(id string) (time.Time, int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.at[id]
	return at, c.due[id], ok
}

// Run sleeps until the next due time, not a whole interval: jobs due in a
// few hundred ms are handed over long before a 30 s interval would end, and
// never before they are due.
func TestRunSleepsUntilTheNextDueTime(t *testing.T) {
	const interval = 30 * time.Second
	q := newQueue(t, newRedis(t).Client(t), 2)
	start := time.Now()
	dues := map[string]time.Time{
		"soon-1": start.Add(150 * time.Millisecond),
		"soon-2": start.Add(300 * time.Millisecond),
		"soon-3": start.Add(450 * time.Millisecond),
	}
	for id, due := range dues {
		addJobs(t, q, due, id)
	}
	seen := newClaimTimes()
	d := &recorder{}
	p := newPoller(t, poller.Config{
		Queues: poller.Static(q), Dispatcher: d, Clock: clock.System{}, Interval: interval, Ack: true,
		OnClaim: seen.record,
	})
	stop := runInBackground(t, p, time.Time{})
	waitFor(t, interval/2, "the three jobs", func() bool { return d.count() == len(dues) })
	tot := stop()

	for id, due := range dues {
		at, dueMS, ok := seen.get(id)
		if !ok {
			t.Fatalf("%s was dispatched but OnClaim never saw it", id)
		}
		if dueMS != due.UnixMilli() {
			t.Errorf("%s reported due %d, scheduled %d", id, dueMS, due.UnixMilli())
		}
		if at.UnixMilli() < dueMS {
			t.Errorf("%s handed over %s early", id, time.UnixMilli(dueMS).Sub(at))
		}
		if lag := at.Sub(due); lag > 5*time.Second {
			t.Errorf("%s handed over %s after its due time: Run slept the interval instead of until the job", id, lag)
		}
		t.Logf("%s: lag %s", id, at.Sub(due))
	}
	if tot.Rounds < 2 {
		t.Errorf("%d rounds: the jobs were not due at the first one", tot.Rounds)
	}
}

// Notify wakes a Run that sleeps a long interval as soon as a job is
// scheduled; without it the job would wait for the interval.
func TestNotifyWakesASleepingRun(t *testing.T) {
	const interval = 30 * time.Second
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			q := newQueue(t, newRedis(t).Client(t), 1)
			// A sentinel due now: its dispatch proves the first round has
			// claimed (and so computed its wake-up) before the job is added.
			addJobs(t, q, time.Now(), "sentinel")
			firstRound := make(chan struct{})
			var once sync.Once
			d := &recorder{dispatched: func([]delayq.Job) { once.Do(func() { close(firstRound) }) }}
			seen := newClaimTimes()
			p := newPoller(t, poller.Config{
				Queues: poller.Static(q), Dispatcher: d, Clock: clock.System{}, Interval: interval, Ack: true,
				OnClaim: seen.record,
			})
			stop := runInBackground(t, p, time.Time{})
			select {
			case <-firstRound:
			case <-time.After(10 * time.Second):
				t.Fatal("first round never dispatched the sentinel")
			}
			time.Sleep(100 * time.Millisecond) // let it finish the round and fall asleep

			due := time.Now().Add(50 * time.Millisecond)
			addJobs(t, q, due, "late")
			if notify {
				p.Notify(due)
				waitFor(t, interval/3, "the notified job", func() bool { return d.count() == 2 })
				at, _, _ := seen.get("late")
				if at.UnixMilli() < due.UnixMilli() {
					t.Fatalf("handed over %s before its due time", due.Sub(at))
				}
			} else {
				time.Sleep(time.Second)
				if n := d.count(); n != 1 {
					t.Fatalf("%d jobs dispatched: the job came without Notify, so this test shows nothing", n)
				}
			}
			stop()
		})
	}
}

// Housekeeping tasks run at most once per Every, a failing one included.
func TestTasksRunAtMostOncePerEvery(t *testing.T) {
	const every = time.Minute
	q := newQueue(t, newRedis(t).Client(t), 1)
	clk := clock.NewFake(t0)
	var (
		mu   sync.Mutex
		runs = map[string][]time.Time{}
	)
	task := func(name string, err error) poller.Task {
		return poller.Task{Name: name, Every: every, Run: func(_ context.Context, now time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			runs[name] = append(runs[name], now)
			return err
		}}
	}
	var emf syncBuffer
	p := newPoller(t, poller.Config{
		Queues: poller.Static(q), Dispatcher: &recorder{}, Clock: clk, Interval: time.Millisecond, Ack: true,
		Tasks:   []poller.Task{task("purge", nil), task("reconcile", errors.New("reconcile: boom"))},
		Metrics: metrics.New(&emf, clk),
	})
	until := t0.Add(10 * time.Minute)
	done := make(chan poller.Totals)
	go func() { done <- p.Run(context.Background(), until) }()
	// Drive the fake clock through ten minutes in 5 s steps while Run loops.
	var tot poller.Totals
drive:
	for {
		select {
		case tot = <-done:
			break drive
		case <-time.After(time.Millisecond):
			clk.Advance(5 * time.Second)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"purge", "reconcile"} {
		times := runs[name]
		if len(times) < 2 || len(times) > 10 {
			t.Errorf("%s ran %d times over 10 minutes, want 2..10", name, len(times))
		}
		if len(times) > 0 && !times[0].Equal(t0) {
			t.Errorf("%s first ran at %v, want at the first round (%v)", name, times[0], t0)
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap < every {
				t.Errorf("%s ran again after %s, less than Every (%s)", name, gap, every)
			}
		}
	}
	if tot.Rounds < len(runs["purge"]) {
		t.Errorf("%d rounds but %d task runs", tot.Rounds, len(runs["purge"]))
	}
	// Each failed run is counted for the alarm (no dimensions) and by task;
	// the task that succeeds is never counted.
	byTask := map[string]int{}
	for line := range strings.Lines(emf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("EMF line %q: %v", line, err)
		}
		if n, ok := m[metrics.HousekeepingFailures].(float64); ok {
			task, _ := m["Task"].(string)
			byTask[task] += int(n)
		}
	}
	if want := len(runs["reconcile"]); byTask[""] != want || byTask["reconcile"] != want || len(byTask) != 2 {
		t.Errorf("HousekeepingFailures by task %v, want %d for the alarm and %d for reconcile (it failed every run)", byTask, want, want)
	}
}

// syncBuffer is an io.Writer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The scheduled Lambda handler, fed the sample EventBridge event, polls until
// margin before its deadline, dispatches what fell due meanwhile and returns
// its totals in time.
func TestHandlerPollsUntilMarginBeforeTheDeadline(t *testing.T) {
	const (
		budget = 2500 * time.Millisecond
		margin = time.Second
	)
	payload, err := os.ReadFile("../../events/poller-scheduled.json")
	if err != nil {
		t.Fatal(err)
	}
	q := newQueue(t, newRedis(t).Client(t), 2)
	now := time.Now()
	ids := jobIDs("h", 50)
	addJobs(t, q, now, ids...)
	later := now.Add(300 * time.Millisecond)
	addJobs(t, q, later, "later")

	var logs syncBuffer
	d := &recorder{}
	seen := newClaimTimes()
	p := newPoller(t, poller.Config{
		Queues: poller.Static(q), Dispatcher: d, Clock: clock.System{}, Ack: true, OnClaim: seen.record,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})

	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	deadline, _ := ctx.Deadline()
	out, err := lambda.NewHandler(p.Handler(margin)).Invoke(ctx, payload)
	returned := time.Now()
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	if !returned.Before(deadline) {
		t.Fatalf("returned %s after the deadline", returned.Sub(deadline))
	}
	if returned.Before(deadline.Add(-margin)) {
		t.Errorf("returned %s before deadline-margin: it stopped polling early", deadline.Add(-margin).Sub(returned))
	}

	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	var tot poller.Totals
	if err := dec.Decode(&tot); err != nil {
		t.Fatalf("response %s is not Totals JSON: %v", out, err)
	}
	if tot.Claimed != 51 || tot.Rounds < 2 || tot.Refused != 0 || tot.Failures != 0 {
		t.Fatalf("totals %+v, want 51 claimed over at least 2 rounds", tot)
	}
	if diff := cmp.Diff(sorted(append(ids, "later")), d.ids()); diff != "" {
		t.Fatalf("dispatched (-want +got):\n%s", diff)
	}
	if at, _, _ := seen.get("later"); at.UnixMilli() < later.UnixMilli() {
		t.Fatalf("the later job was handed over %s early", later.Sub(at))
	}
	if st := stats(t, q, time.Now()); st != (delayq.Stats{}) {
		t.Fatalf("queue after the invocation: %+v", st)
	}
	if !strings.Contains(logs.String(), `"event_id":"53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa"`) {
		t.Errorf("the invocation log does not name the event; logs:\n%s", logs.String())
	}
}

// A refused job is due again RetryDelay later, and Run's sleep must honour
// that, not the whole interval: RoundResult.Next is "the earliest due time
// still waiting", which after the round includes the re-scheduled jobs.
func TestRunRetriesRefusedJobsAfterRetryDelayNotInterval(t *testing.T) {
	const (
		interval   = 30 * time.Second
		retryDelay = 100 * time.Millisecond
	)
	q := newQueue(t, newRedis(t).Client(t), 1)
	var (
		mu      sync.Mutex
		refused bool
	)
	// Refuse the job the first time only.
	d := &recorder{refuse: func(delayq.Job) bool {
		mu.Lock()
		defer mu.Unlock()
		first := !refused
		refused = true
		return first
	}}
	p := newPoller(t, poller.Config{
		Queues: poller.Static(q), Dispatcher: d, Clock: clock.System{}, Interval: interval, RetryDelay: retryDelay, Ack: true,
	})
	addJobs(t, q, time.Now(), "flaky")
	// The round that refuses reports the retry as its Next.
	r := round(t, p)
	if r.Refused != 1 || r.Next.IsZero() || time.Until(r.Next) > retryDelay {
		t.Errorf("round after a refusal: %+v; want Refused 1 and Next at the retry, within %s", r, retryDelay)
	}
	if removed, err := q.Cancel(context.Background(), 0, "flaky"); err != nil || !removed {
		t.Fatalf("reset: %v %v", removed, err)
	}
	mu.Lock()
	refused = false
	mu.Unlock()

	// And Run, asleep with a 30 s interval, retries it about RetryDelay later.
	addJobs(t, q, time.Now(), "flaky")
	start := time.Now()
	stop := runInBackground(t, p, time.Time{})
	deadline := time.Now().Add(5 * time.Second)
	for d.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	if d.count() != 1 {
		t.Fatalf("the refused job was not retried within 5s (RetryDelay %s): Run slept the whole %s interval", retryDelay, interval)
	}
	t.Logf("retried %s after the first dispatch", time.Since(start))
}

// TestChainedBatchesWithRefusals: a backlog worked through batch after batch
// in one round, each ack travelling with the next claim, loses nothing when
// some jobs are refused: the refused wait RetryDelay, the rest are acked,
// whether a batch is acked whole (by its lease) or by ids.
func TestChainedBatchesWithRefusals(t *testing.T) {
	srv := newRedis(t)
	ctx := context.Background()
	q := newQueue(t, srv.Client(t), 1)
	for i := range 10 {
		if err := q.Add(ctx, 0, fmt.Sprintf("j%d", i), t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewFake(t0.Add(time.Second))
	rec := &recorder{refuse: func(j delayq.Job) bool { return j.ID == "j4" || j.ID == "j5" }}
	p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: rec, Clock: clk, Batch: 3, Ack: true,
		RetryDelay: time.Minute})
	got := round(t, p)
	want := poller.RoundResult{Claimed: 10, Refused: 2, Next: clk.Now().Add(time.Minute)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round (-want +got):\n%s", diff)
	}
	if got := len(rec.jobs()); got != 8 {
		t.Fatalf("%d jobs handed over, want 8", got)
	}
	st, err := q.Stats(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Everything handed over is acked; the refused two wait.
	if diff := cmp.Diff(delayq.Stats{Due: 2}, st); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
	clk.Advance(time.Minute)
	rec.refuse = nil
	if got := round(t, p); got.Claimed != 2 || got.Refused != 0 {
		t.Fatalf("second round: %+v", got)
	}
	if st, err := q.Stats(ctx, clk.Now()); err != nil || st != (delayq.Stats{}) {
		t.Fatalf("queue after the refused came back: %+v %v", st, err)
	}
	seen := map[string]int{}
	for _, j := range rec.jobs() {
		seen[j.ID]++
	}
	for i := range 10 {
		if id := fmt.Sprintf("j%d", i); seen[id] != 1 {
			t.Errorf("%s handed over %d times", id, seen[id])
		}
	}
}

// An ack that fails between chained batches fails the round, as a failed
// ack of the round's last batch does; the jobs come back when their lease
// expires.
func TestFailedChainedAckFailsTheRound(t *testing.T) {
	srv := newRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	q := newQueue(t, rdb, 1)
	for i := range 6 {
		if err := q.Add(context.Background(), 0, fmt.Sprintf("j%d", i), t0); err != nil {
			t.Fatal(err)
		}
	}
	// Redis dies while the first batch is handed over, so the ack that
	// travels with the second claim fails.
	rec := &recorder{dispatched: func([]delayq.Job) { srv.Kill() }}
	p := newPoller(t, poller.Config{Queues: poller.Static(q), Dispatcher: rec, Clock: clock.NewFake(t0.Add(time.Second)),
		Batch: 3, Ack: true})
	r, err := p.Round(context.Background())
	if err == nil {
		t.Fatalf("the round succeeded although its ack failed: %+v", r)
	}
	if r.Claimed != 3 || rec.dispatchCalls() != 1 {
		t.Errorf("claimed %d in %d dispatches, want 3 in 1", r.Claimed, rec.dispatchCalls())
	}
}
