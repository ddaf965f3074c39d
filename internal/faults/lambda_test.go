package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/history"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/sqsfake"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/dispatch"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// awsRun is a scenario on the AWS wiring, in process: the enqueue Lambda
// handler for the API, pollers invoked as EventBridge would (each call polls
// until shortly before its deadline, calls overlapping), sending through the
// real SQS client to an SQS endpoint whose event source feeds the consumer
// Lambda handler, with partial batch failures redelivered.
type awsRun struct {
	*load
	a       *app.App
	sqs     *sqsfake.Server
	source  *sqsfake.EventSource
	stopped chan struct{}
	stop    context.CancelFunc
	// log is the app's log file.
	log string
}

// awsOptions shape an awsRun.
type awsOptions struct {
	env map[string]string
	// function wraps the consumer function (to inject failures).
	function func(sqsfake.Invoker) sqsfake.Invoker
	// watch, if set, receives the Redis client (the cluster's guard).
	watch func(redis.UniversalClient)
	// payoutURL, if set, maps the fake provider's URL to the one the
	// consumer calls (a proxy in front of it).
	payoutURL func(providerURL string) string
}

func newAWSRun(t *testing.T, name string, o awsOptions) *awsRun {
	t.Helper()
	provider := fakes.NewProvider(t, "pay-secret")
	provider.Decide(refuseRejects(nil))
	finance := fakes.NewFinance(t, "fin-secret")
	env := map[string]string{
		"HOURGLASS_AUTH": "jwt", "PAYOUT_URL": provider.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": finance.URL, "FINANCE_SIGNING_SECRET": "fin-secret", "FINANCE_TOPIC_ARN": "",
		"PAYOUT_TIMEOUT": "1s", "HOURGLASS_RETRY_BASE": "50ms", "HOURGLASS_RETRY_CAP": "200ms", "HOURGLASS_MAX_ATTEMPTS": "8",
		"HOURGLASS_LEASE": "3s", "HOURGLASS_POLL_INTERVAL": "100ms", "HOURGLASS_LOG_LEVEL": "warn",
		// A load run from one address is not what rate limits are for.
		"HOURGLASS_RATE_WITHDRAWAL_USER": "off", "HOURGLASS_RATE_WITHDRAWAL_SOURCE": "off",
		// The functions' client passes the ElastiCache Serverless guard.
		"HOURGLASS_REDIS_COMMANDS": redistest.ServerlessCommands,
	}
	if o.payoutURL != nil {
		env["PAYOUT_URL"] = o.payoutURL(provider.URL)
	}
	for k, v := range o.env {
		env[k] = v
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	cfg, err := config.Load(config.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	rdb, err := app.Connect(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	redistest.AssertNoRefusals(t)
	if o.watch != nil {
		o.watch(rdb)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "app.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			if len(out) > 6000 {
				out = out[len(out)-6000:]
			}
			t.Logf("app log (tail):\n%s", out)
		}
	})
	a, err := app.New(cfg, app.NewLogger(logf, cfg.SlogLevel()), rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	prov, err := a.Provider(false)
	if err != nil {
		t.Fatal(err)
	}
	notifier, err := a.Notifier(ctx, os.Stdout, false)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := a.Processor(prov, notifier)
	if err != nil {
		t.Fatal(err)
	}
	r := &awsRun{a: a, sqs: sqsfake.New(t), stopped: make(chan struct{}), log: logf.Name()}
	api := &lambdaAPI{serve: a.WithdrawalAPI().Serve, createEvent: readEvent(t, "withdrawal-create.json"),
		cancelEvent: readEvent(t, "withdrawal-cancel.json"),
		ledgerList: func(ctx context.Context, user string) ([]history.Final, error) {
			var out []history.Final
			cursor := ""
			for {
				page, err := a.Service.List(ctx, user, withdrawal.MaxPageSize, cursor)
				if err != nil {
					return nil, err
				}
				for _, w := range page.Items {
					out = append(out, finalOf(w))
				}
				if page.Next == "" {
					return out, nil
				}
				cursor = page.Next
			}
		}}
	r.load = newLoad(t, name, api, provider, finance)

	// The consumer function: one handler per concurrent invocation, as
	// Lambda runs one event per instance; every delivery of a payout job
	// goes into the history.
	const instances = 4
	var function sqsfake.Invoker = &recording{h: r.h, pool: handlerPool(a.Consumer(proc, false).Handle, instances)}
	if o.function != nil {
		function = o.function(function)
	}
	r.source = &sqsfake.EventSource{Queue: r.sqs, Function: function, Visibility: 300 * time.Millisecond,
		MaxReceives: 1000, Concurrency: instances}

	d, err := dispatch.NewSQS(r.sqs.Client(), sqsfake.QueueURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Poller(d, true)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	r.stop = stop
	var wg sync.WaitGroup
	wg.Go(func() { r.source.Run(runCtx) })
	// Two pollers whose invocations overlap, 2s deadlines, as the schedule
	// starts one while the last one finishes.
	handler := p.Handler(300 * time.Millisecond)
	for i := range 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Second)
			for runCtx.Err() == nil {
				ctx, cancel := context.WithTimeout(runCtx, 2*time.Second)
				_, _ = handler(ctx, events.EventBridgeEvent{ID: "poll-" + strconv.Itoa(i), DetailType: "Scheduled Event"})
				cancel()
			}
		})
	}
	go func() { wg.Wait(); close(r.stopped) }()
	t.Cleanup(r.shutdown)
	return r
}

func (r *awsRun) shutdown() {
	r.stop()
	<-r.stopped
}

// reconciled sums what the reconciler reported repairing, from the app log.
func (r *awsRun) reconciled() int {
	raw, err := os.ReadFile(r.log)
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var rec struct {
			Msg                                 string
			Scheduled, Redispatched, Renotified int
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "reconciler repaired withdrawals" {
			n += rec.Scheduled + rec.Redispatched + rec.Renotified
		}
	}
	return n
}

// handlerPool makes n Lambda handlers of h: each runs one invocation at a
// time (a lambda.Handler reuses its response buffer).
func handlerPool(h any, n int) chan lambda.Handler {
	pool := make(chan lambda.Handler, n)
	for range n {
		pool <- lambda.NewHandler(h)
	}
	return pool
}

// recording invokes the consumer from the pool and records each delivery of
// a payout job.
type recording struct {
	h    *history.History
	pool chan lambda.Handler
}

func (f *recording) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	var ev events.SQSEvent
	if err := json.Unmarshal(payload, &ev); err == nil {
		for _, m := range ev.Records {
			if job, err := dispatch.DecodeJob(m.Body); err == nil && job.Kind == withdrawal.JobKind {
				f.h.Delivered(job.ID, time.Now())
			}
		}
	}
	h := <-f.pool
	defer func() { f.pool <- h }()
	out, err := h.Invoke(ctx, payload)
	return slices.Clone(out), err
}

// flaky wraps the consumer function: every dupEvery-th batch is delivered
// twice at once (SQS delivers at least once), and every failEvery-th
// invocation fails after its work is done (a timeout, a crash before the
// response): its whole batch comes again.
type flaky struct {
	next                sqsfake.Invoker
	dupEvery, failEvery int64
	n, dups, failed     atomic.Int64
}

func (f *flaky) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	n := f.n.Add(1)
	if n%f.dupEvery == 0 {
		f.dups.Add(1)
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = f.next.Invoke(ctx, payload) })
		defer wg.Wait()
	}
	out, err := f.next.Invoke(ctx, payload)
	if err == nil && n%f.failEvery == 0 {
		f.failed.Add(1)
		return nil, errors.New("simulated: the invocation timed out after doing its work")
	}
	return out, err
}

// TestFaultSQSPartialBatchFailures runs a load on the AWS wiring with the
// work queue misbehaving at both ends: SQS refuses some entries of
// SendMessageBatch and fails some calls whole (the poller re-schedules
// them); finance refuses a share of first messages (the consumer reports
// those messages failed and SQS delivers them again); some invocations fail
// after doing their work and some batches are delivered twice.
func TestFaultSQSPartialBatchFailures(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t)
	var fl *flaky
	r := newAWSRun(t, "SQS partial batch failures", awsOptions{
		env: map[string]string{"REDIS_URL": redis.URL()},
		function: func(next sqsfake.Invoker) sqsfake.Invoker {
			fl = &flaky{next: next, dupEvery: 7, failEvery: 11}
			return fl
		},
	})
	var refusedEntries, failedCalls atomic.Int64
	r.sqs.Decide = func(call int, id string) bool {
		if pct(fmt.Sprintf("%d/%s", call, id)) < 10 {
			refusedEntries.Add(1)
			return false
		}
		return true
	}
	r.sqs.Fail = func(call int, _ []sqsfake.Entry) bool {
		if call%13 == 5 {
			failedCalls.Add(1)
			return true
		}
		return false
	}
	r.finance.Refuse(func(id string, n int) int {
		if n == 1 && pct(id) < 30 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	r.provider.Decide(refuseRejects(func(key string, _ fakes.Payout, n int) (int, time.Duration) {
		if n == 1 && pct(key) < 10 {
			return http.StatusServiceUnavailable, 0
		}
		return http.StatusOK, 0
	}))

	began := time.Now()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	r.run(ctx)
	stop()
	finals := r.settle(90 * time.Second)
	r.shutdown()
	rep := r.check(finals, history.Options{MaxAttempts: 8, LateAfter: 2 * time.Second})
	es := r.source
	t.Logf("%s: SQS refused %d entries and failed %d calls whole; %d invocations, %d failed (%d on purpose after their work), "+
		"%d messages reported failed, %d redeliveries, %d batches delivered twice, %d dead; run took %s",
		r.name, refusedEntries.Load(), failedCalls.Load(), es.Invocations.Load(), es.FailedInvocations.Load(), fl.failed.Load(),
		es.ItemFailures.Load(), es.Redelivered.Load(), fl.dups.Load(), len(es.Dead()), time.Since(began).Round(100*time.Millisecond))
	if es.ItemFailures.Load() == 0 || es.Redelivered.Load() == 0 || refusedEntries.Load() == 0 {
		t.Errorf("%s: the faults did not bite", r.name)
	}
	if rep.Recovered == 0 {
		t.Errorf("%s: nothing needed a redelivery", r.name)
	}
}

var tableSeq atomic.Int64

// TestFaultClusterFailover runs a load on the AWS wiring over a 3-master
// Redis Cluster with a replica per master and the DynamoDB ledger (the
// deployed setup), and kills the master holding the most withdrawal queue
// shards: its replica takes over, the client follows, requests meanwhile
// may answer 503 (not acknowledged), and what the failover lost of Redis
// (replication is asynchronous) the reconciler puts back from the ledger.
func TestFaultClusterFailover(t *testing.T) {
	faultRun(t)
	const shards = 6
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	db := dynalitetest.Start(t)
	n := tableSeq.Add(1)
	r := newAWSRun(t, "cluster failover", awsOptions{
		env: map[string]string{
			"REDIS_URL": c.URL(), "HOURGLASS_QUEUE_SHARDS": strconv.Itoa(shards),
			"HOURGLASS_LEDGER": "dynamodb", "DYNAMODB_ENDPOINT": db.Endpoint, "HOURGLASS_RECONCILE_INTERVAL": "1s",
			"HOURGLASS_WITHDRAWALS_TABLE": fmt.Sprintf("faults-withdrawals-%d", n),
			"HOURGLASS_ORDERS_TABLE":      fmt.Sprintf("faults-orders-%d", n),
			"HOURGLASS_IDEMPOTENCY_TABLE": fmt.Sprintf("faults-idempotency-%d", n),
			"AWS_REGION":                  "us-east-1", "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
		},
		watch: func(rdb redis.UniversalClient) { c.Watch(rdb) },
	})
	r.pause = 60 * time.Millisecond // dynalite is slower than Redis

	perMaster := map[string][]int{}
	for s := range shards {
		m := c.MasterOf(delayq.KeysOf("hg:", withdrawal.QueueName, s).Tag)
		perMaster[m] = append(perMaster[m], s)
	}
	victim := ""
	for m, ss := range perMaster {
		if victim == "" || len(ss) > len(perMaster[victim]) {
			victim = m
		}
	}
	t.Logf("withdrawal shards per master: %v; killing %s", perMaster, victim)

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	time.Sleep(4 * time.Second)
	acked := len(r.h.Acknowledged())
	killed := time.Now()
	c.Kill(victim)
	took := time.Duration(0)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ms := c.Masters()
		if len(ms) == 3 && !slices.Contains(ms, victim) {
			took = time.Since(killed)
			break
		}
	}
	if took == 0 {
		t.Fatalf("no replica took over from %s within 30s", victim)
	}
	t.Logf("killed master %s with %d acknowledged; a replica took over after %s; masters now %v", victim, acked,
		took.Round(100*time.Millisecond), c.Masters())
	time.Sleep(5 * time.Second)
	stop()
	<-loaded
	finals := r.settle(120 * time.Second)
	r.shutdown()
	r.check(finals, history.Options{MaxAttempts: 8, LateAfter: 2 * time.Second})
	c.AssertNoCrossSlot(t)
	t.Logf("%s: the reconciler repaired %d withdrawals; run took %s", r.name, r.reconciled(), time.Since(began).Round(100*time.Millisecond))
}
