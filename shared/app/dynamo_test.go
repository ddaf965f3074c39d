package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/app"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// These tests prove that with the DynamoDB ledger Redis is only the fast
// path: what Redis loses (FLUSHALL standing in for a failover that lost the
// last writes, a crash between the ledger write and the schedule) the
// reconciler puts back, and every accepted withdrawal is paid once.

var dynTableSeq atomic.Int64

// dynTables names a fresh set of ledger tables for this test, through the
// environment app.New reads.
func dynTables(t *testing.T) ledger.Tables {
	t.Helper()
	n := dynTableSeq.Add(1)
	tables := ledger.Tables{
		Withdrawals: fmt.Sprintf("app-withdrawals-%d", n),
		Orders:      fmt.Sprintf("app-orders-%d", n),
		Idempotency: fmt.Sprintf("app-idempotency-%d", n),
	}
	t.Setenv("HOURGLASS_WITHDRAWALS_TABLE", tables.Withdrawals)
	t.Setenv("HOURGLASS_ORDERS_TABLE", tables.Orders)
	t.Setenv("HOURGLASS_IDEMPOTENCY_TABLE", tables.Idempotency)
	return tables
}

// dynStack is the AWS-shaped pipeline on the dynamodb ledger: real
// redis-server, dynalite, the fake provider and finance, the poller handing
// jobs to a capturing dispatcher standing in for SQS (acking them, as with
// SQS), and the consumer Lambda handler fed from it.
type dynStack struct {
	a        *app.App
	redis    *redistest.Server
	rdb      *redis.Client // a client of its own, for FLUSHALL and inspection
	provider *fakes.Provider
	finance  *fakes.Finance
	// consumers are the consumer Lambda's instances: each runs one
	// invocation at a time (a lambda.Handler reuses its response buffer).
	consumers chan lambda.Handler
	poller    *poller.Poller
	sent      *capture
}

func newDynStack(t *testing.T, db *dynalitetest.Server) *dynStack {
	t.Helper()
	rs := redistest.Start(t)
	prov := fakes.NewProvider(t, "pay-secret")
	fin := fakes.NewFinance(t, "fin-secret")
	dynTables(t)
	for k, v := range map[string]string{
		"REDIS_URL": rs.URL(), "HOURGLASS_AUTH": "jwt", "PAYOUT_URL": prov.URL, "PAYOUT_SIGNING_SECRET": "pay-secret",
		"FINANCE_WEBHOOK_URL": fin.URL, "FINANCE_SIGNING_SECRET": "fin-secret",
		"HOURGLASS_LEDGER": "dynamodb", "DYNAMODB_ENDPOINT": db.Endpoint,
		// Attempts time out quickly (deadline 2*1s+5s), retries come fast.
		"PAYOUT_TIMEOUT": "1s", "HOURGLASS_RETRY_BASE": "50ms", "HOURGLASS_RETRY_CAP": "200ms", "HOURGLASS_MAX_ATTEMPTS": "8",
		// The reconciler re-sends an unnotified outcome after this grace.
		"HOURGLASS_RECONCILE_INTERVAL": "1s",
		"HOURGLASS_LEASE":              "5s",
	} {
		t.Setenv(k, v)
	}
	a := appFromEnv(t, config.Lambda)
	if a.Dynamo == nil {
		t.Fatal("HOURGLASS_LEDGER=dynamodb built no DynamoDB client")
	}
	if _, ok := a.Ledger.(*ledger.Dynamo); !ok {
		t.Fatalf("ledger is %T, want *ledger.Dynamo", a.Ledger)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.CreateTables(ctx); err != nil {
		t.Fatal(err)
	}
	provider, err := a.Provider(false)
	if err != nil {
		t.Fatal(err)
	}
	notifier, err := a.Notifier(context.Background(), io.Discard, false)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := a.Processor(provider, notifier)
	if err != nil {
		t.Fatal(err)
	}
	st := &dynStack{a: a, redis: rs, rdb: rs.Client(t), provider: prov, finance: fin,
		consumers: make(chan lambda.Handler, 4), sent: &capture{}}
	handle := a.Consumer(proc, false).Handle
	for range cap(st.consumers) {
		st.consumers <- lambda.NewHandler(handle)
	}
	if st.poller, err = a.Poller(st.sent, true); err != nil {
		t.Fatal(err)
	}
	return st
}

// pipelineStats counts what the pipeline goroutines did.
type pipelineStats struct {
	rounds, roundErrors, delivered, failedDeliveries atomic.Int64
	reconciles, reconcileErrors                      atomic.Int64

	mu  sync.Mutex
	rec ledger.Reconciliation // summed over every pass
}

// run drives the pipeline until ctx is done: one goroutine loops poller
// rounds and delivers what they dispatched to the consumer as SQS events (up
// to 4 events at once, as concurrent Lambda consumers; failed messages come
// back after a visibility timeout, as SQS redelivers them), another runs the
// reconciler every reconcileEvery. It returns when both have stopped.
func (s *dynStack) run(ctx context.Context, t *testing.T, reconcileEvery time.Duration, stats *pipelineStats) (wait func()) {
	var wg sync.WaitGroup
	wg.Go(func() {
		type redelivery struct {
			at  time.Time
			job delayq.Job
		}
		var (
			mu      sync.Mutex
			pending []redelivery
			msgSeq  atomic.Int64
		)
		var consumers sync.WaitGroup
		defer consumers.Wait()
		for ctx.Err() == nil {
			if _, err := s.poller.Round(context.WithoutCancel(ctx)); err != nil {
				stats.roundErrors.Add(1)
			}
			stats.rounds.Add(1)
			jobs := s.sent.take()
			now := time.Now()
			mu.Lock()
			keep := pending[:0]
			for _, r := range pending {
				if now.After(r.at) {
					jobs = append(jobs, r.job)
				} else {
					keep = append(keep, r)
				}
			}
			pending = keep
			mu.Unlock()
			if len(jobs) == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			for start := 0; start < len(jobs); start += 10 {
				batch := jobs[start:min(start+10, len(jobs))]
				instance := <-s.consumers
				consumers.Go(func() {
					defer func() { s.consumers <- instance }()
					ev := events.SQSEvent{}
					byMsg := map[string]delayq.Job{}
					for _, j := range batch {
						body, _ := json.Marshal(j)
						id := "m-" + strconv.FormatInt(msgSeq.Add(1), 10)
						byMsg[id] = j
						ev.Records = append(ev.Records, events.SQSMessage{MessageId: id, Body: string(body), EventSource: "aws:sqs"})
					}
					payload, _ := json.Marshal(ev)
					out, err := instance.Invoke(context.Background(), payload)
					if err != nil {
						t.Errorf("consumer invocation failed: %v", err)
						return
					}
					var resp events.SQSEventResponse
					if err := json.Unmarshal(out, &resp); err != nil {
						t.Errorf("consumer response %s: %v", out, err)
						return
					}
					stats.delivered.Add(int64(len(batch)))
					stats.failedDeliveries.Add(int64(len(resp.BatchItemFailures)))
					mu.Lock()
					for _, f := range resp.BatchItemFailures {
						pending = append(pending, redelivery{at: time.Now().Add(300 * time.Millisecond), job: byMsg[f.ItemIdentifier]})
					}
					mu.Unlock()
				})
			}
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(reconcileEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rec, _, err := s.a.Reconcile(context.WithoutCancel(ctx), time.Now())
			stats.reconciles.Add(1)
			if err != nil {
				stats.reconcileErrors.Add(1)
			}
			stats.mu.Lock()
			stats.rec.Scheduled += rec.Scheduled
			stats.rec.Promoted += rec.Promoted
			stats.rec.Redispatched += rec.Redispatched
			stats.rec.Renotified += rec.Renotified
			stats.mu.Unlock()
		}
	})
	return wg.Wait
}

// TestDynamoLedgerSurvivesRedisDataLoss: with the dynamodb ledger, 500
// withdrawals due within 0-3 s are accepted while the pipeline runs and
// Redis is wiped with FLUSHALL five times at random points (a failover that
// lost data). The reconciler puts back what Redis lost: every accepted
// withdrawal is paid, under its own idempotency key, and finance hears of each.
func TestDynamoLedgerSurvivesRedisDataLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute-long fault test")
	}
	started := time.Now()
	db := dynalitetest.Start(t)
	s := newDynStack(t, db)
	const (
		n       = 500
		flushes = 5
	)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var stats pipelineStats
	waitPipeline := s.run(ctx, t, 200*time.Millisecond, &stats)
	defer waitPipeline()
	defer stop()

	// Withdrawals are accepted while the pipeline runs, so Redis always
	// holds some not yet due when it is wiped: were they all accepted first,
	// the poller would have handed every one to the SQS stand-in (where
	// Redis loss cannot reach it) before the first FLUSHALL.
	type flushRecord struct {
		due, inflight, keys int64
		paidBefore          int
	}
	var (
		flushMu  sync.Mutex
		flushLog []flushRecord
		flushWG  sync.WaitGroup
	)
	flushWG.Go(func() {
		for range flushes {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rand.IntN(701)) * time.Millisecond):
			}
			st, _ := s.a.Withdrawals.Stats(ctx, time.Now())
			keys, _ := s.rdb.DBSize(ctx).Result()
			paid := s.provider.Paid()
			if err := s.rdb.FlushAll(ctx).Err(); err != nil {
				t.Errorf("FLUSHALL: %v", err)
				return
			}
			flushMu.Lock()
			flushLog = append(flushLog, flushRecord{due: st.Due, inflight: st.Inflight, keys: keys, paidBefore: paid})
			flushMu.Unlock()
		}
	})

	ids := make(map[string]string, n) // id -> user
	var idsMu sync.Mutex
	var createWG sync.WaitGroup
	createStart := time.Now()
	for w := range 4 {
		createWG.Go(func() {
			for i := w; i < n; i += 4 {
				user := fmt.Sprintf("user-%d", i%37)
				body := fmt.Sprintf(`{"amount":"%d.25","currency":"USD","destination":"acct_%d","delay_seconds":%d}`, 1+i%90, i, rand.IntN(4))
				c, err := httpapi.CreateWithdrawal(context.Background(), s.a.Service, user, fmt.Sprintf("key-%d", i), []byte(body))
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				idsMu.Lock()
				ids[c.ID] = user
				idsMu.Unlock()
			}
		})
	}
	createWG.Wait()
	createTook := time.Since(createStart)
	if t.Failed() || len(ids) != n {
		t.Fatalf("accepted %d of %d withdrawals", len(ids), n)
	}

	// Cheap counters first; the ledger sweep once they say done.
	finishedAll := func() bool {
		if s.provider.Paid() < n {
			return false
		}
		heard := s.finance.IDs()
		for id := range ids {
			if heard[id] == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(90 * time.Second)
	for !finishedAll() {
		if time.Now().After(deadline) {
			missing := 0
			for id := range ids {
				if _, paid := s.provider.Calls(id); !paid {
					missing++
				}
			}
			t.Fatalf("after 90s: %d of %d unpaid at the provider, finance heard of %d; reconciler %+v",
				missing, n, len(s.finance.IDs()), stats.rec)
		}
		time.Sleep(100 * time.Millisecond)
	}
	flushWG.Wait() // the FLUSHALLs happen while there is work, not after it
	var unsettled []string
	for {
		unsettled = unsettled[:0]
		for id, user := range ids {
			w, err := s.a.Service.Get(context.Background(), user, id)
			if err != nil || w.Status != withdrawal.Paid || w.Untold() {
				unsettled = append(unsettled, fmt.Sprintf("%s %s notified=%v %v", id, w.Status, !w.Untold(), err))
			}
		}
		if len(unsettled) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	waitPipeline()
	if len(unsettled) > 0 {
		t.Fatalf("%d withdrawals not settled in the ledger, e.g. %v", len(unsettled), unsettled[:min(5, len(unsettled))])
	}

	repeats, maxCalls := 0, 0
	for id, user := range ids {
		calls, paid := s.provider.Calls(id)
		if !paid {
			t.Errorf("%s never paid", id)
		}
		repeats += calls - 1
		maxCalls = max(maxCalls, calls)
		w, err := s.a.Service.Get(context.Background(), user, id)
		if err != nil || w.Status != withdrawal.Paid || w.PayoutID != "po_"+id {
			t.Errorf("%s in the ledger: %+v %v", id, w, err)
		}
		msgs := s.finance.Of(id)
		if len(msgs) == 0 {
			t.Errorf("finance never heard of %s", id)
		}
		for _, m := range msgs {
			if m.Status != withdrawal.Paid || m.PayoutID != "po_"+id || m.UserID != user {
				t.Errorf("finance message for %s: %+v", id, m)
			}
		}
	}
	// The provider paid exactly the accepted withdrawals, each under its id.
	if got := s.provider.Paid(); got != n {
		t.Errorf("provider paid %d keys, want %d", got, n)
	}
	financeMsgs := 0
	for id, c := range s.finance.IDs() {
		financeMsgs += c
		if _, ok := ids[id]; !ok {
			t.Errorf("finance heard of unknown withdrawal %s", id)
		}
	}
	// Nothing is left outstanding: the sparse index is empty.
	final, err := s.a.Ledger.(*ledger.Dynamo).Reconcile(context.Background(), time.Now())
	if err != nil || final.Total() != 0 {
		t.Errorf("a reconciler pass after the end repaired %+v (%v), want nothing", final, err)
	}

	flushMu.Lock()
	defer flushMu.Unlock()
	if len(flushLog) != flushes {
		t.Fatalf("%d FLUSHALLs ran, want %d", len(flushLog), flushes)
	}
	var wipedJobs int64
	hits := 0
	for _, f := range flushLog {
		wipedJobs += f.due + f.inflight
		if f.due+f.inflight > 0 {
			hits++
		}
	}
	if wipedJobs == 0 {
		t.Fatalf("no FLUSHALL wiped a queued job (%+v): the test proved nothing", flushLog)
	}
	stats.mu.Lock()
	rec := stats.rec
	stats.mu.Unlock()
	if rec.Scheduled == 0 {
		t.Errorf("the reconciler never put a withdrawal back, though %d queued jobs were wiped", wipedJobs)
	}
	t.Logf("%d accepted in %s while the pipeline ran; %d FLUSHALLs, %d of them wiped queued jobs (%d jobs in all): %+v",
		n, createTook.Round(time.Millisecond), len(flushLog), hits, wipedJobs, flushLog)
	t.Logf("reconciler: %d passes (%d with errors), repaired %+v", stats.reconciles.Load(), stats.reconcileErrors.Load(), rec)
	t.Logf("pipeline: %d poller rounds (%d failed), %d deliveries (%d reported failed)",
		stats.rounds.Load(), stats.roundErrors.Load(), stats.delivered.Load(), stats.failedDeliveries.Load())
	t.Logf("provider: %d paid once each; %d repeated calls under an existing key (allowed: same idempotency key; max %d calls for one); finance: %d messages for %d withdrawals; took %s",
		n, repeats, maxCalls, financeMsgs, n, time.Since(started).Round(time.Millisecond))
}

// dynLedgerEnv is the DynamoDB ledger built by hand, so that its clock is a
// fake one: Service, ledger, queue and processor all read clk.
type dynLedgerEnv struct {
	clk      *clock.Fake
	rdb      *redis.Client
	queue    *delayq.Queue
	tables   ledger.Tables
	ledger   *ledger.Dynamo
	svc      *withdrawal.Service
	provider *countingProvider
	finance  *recordingNotifier
	proc     *withdrawal.Processor
}

func newDynLedgerEnv(t *testing.T, db *dynalitetest.Server, clk *clock.Fake, api ledger.DynamoAPI) *dynLedgerEnv {
	t.Helper()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	tables := dynTables(t)
	if err := ledger.CreateTables(context.Background(), db.Client(), tables); err != nil {
		t.Fatal(err)
	}
	q, err := delayq.New(rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if api == nil {
		api = db.Client()
	}
	e := &dynLedgerEnv{clk: clk, rdb: rdb, queue: q, tables: tables,
		provider: &countingProvider{calls: map[string]int{}}, finance: &recordingNotifier{}}
	e.ledger = ledger.NewDynamo(api, tables, q, ledger.DynamoOptions{Horizon: time.Hour, Logger: discardLogger()})
	e.svc = e.service(t, e.ledger)
	e.proc, err = withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: e.ledger, Provider: e.provider, Notifier: e.finance, Clock: clk, Logger: discardLogger(),
		RetryBase: time.Second, RetryCap: time.Minute, AttemptTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *dynLedgerEnv) service(t *testing.T, l withdrawal.Ledger) *withdrawal.Service {
	t.Helper()
	svc, err := withdrawal.NewService(withdrawal.Config{Ledger: l, Clock: e.clk, ShardFor: e.queue.ShardFor, Rules: withdrawal.Rules{
		Currencies: []string{"CNY", "USD", "EUR", "JPY"}, MaxAmount: decimal.RequireFromString("1000000"),
		DefaultDelay: 30 * time.Minute, MaxDelay: 30 * 24 * time.Hour,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (e *dynLedgerEnv) holds(t *testing.T, w withdrawal.Withdrawal) bool {
	t.Helper()
	held, err := e.queue.Holds(context.Background(), []delayq.Ref{{Shard: w.Shard, ID: w.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return held[0]
}

// drainAt claims every job due at the fake clock's now and processes it.
func (e *dynLedgerEnv) drainAt(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	n := 0
	for shard := range e.queue.Shards() {
		c, err := e.queue.Claim(ctx, shard, e.clk.Now(), time.Minute, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range c.Jobs {
			if err := e.proc.Process(ctx, withdrawal.Ref{Shard: j.Shard, ID: j.ID}); err != nil {
				t.Fatalf("process %s: %v", j.ID, err)
			}
			if _, err := e.queue.Ack(ctx, j.Shard, j.Lease, j.ID); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	return n
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// countingProvider pays each withdrawal id once, counting calls per id.
type countingProvider struct {
	mu    sync.Mutex
	calls map[string]int
}

func (p *countingProvider) Pay(_ context.Context, w withdrawal.Withdrawal) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[w.ID]++
	return "po_" + w.ID, nil
}

// Lookup answers like the provider it stands for: what it paid, it paid.
func (p *countingProvider) Lookup(_ context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls[w.ID] > 0 {
		return withdrawal.Lookup{State: withdrawal.LookupPaid, PayoutID: "po_" + w.ID}, nil
	}
	return withdrawal.Lookup{State: withdrawal.LookupNotFound}, nil
}

func (p *countingProvider) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[id]
}

func (p *countingProvider) keys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// recordingNotifier is finance: it records every message.
type recordingNotifier struct {
	mu   sync.Mutex
	msgs []withdrawal.Processed
}

func (f *recordingNotifier) Notify(_ context.Context, m withdrawal.Processed) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, m)
	return nil
}

func (f *recordingNotifier) of(id string) []withdrawal.Processed {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []withdrawal.Processed
	for _, m := range f.msgs {
		if m.WithdrawalID == id {
			out = append(out, m)
		}
	}
	return out
}

var dynT0 = time.Date(2026, 11, 29, 10, 0, 0, 250_000_000, time.UTC)

// TestDynamoLongDelayWaitsInTheLedger: a withdrawal due in 3 days stays out of
// Redis; 40 minutes before it is due (inside the 1 h horizon) the reconciler
// promotes it with its exact due time, and it is claimed and paid at that
// millisecond, not one before.
func TestDynamoLongDelayWaitsInTheLedger(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()

	due := dynT0.Add(72*time.Hour + 123*time.Millisecond) // 2026-12-02T10:00:00.373Z
	c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "long-1", []byte(fmt.Sprintf(
		`{"amount":"300.00","currency":"EUR","destination":"iban_77","process_at":%q}`, clock.Format(due))))
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.svc.Get(ctx, "alice", c.ID)
	if err != nil || w.Status != withdrawal.Scheduled || !w.DueAt.Equal(due) {
		t.Fatalf("created %+v %v, want scheduled at %v", w, err, due)
	}
	if e.holds(t, w) {
		t.Fatal("a withdrawal due in 3 days is in Redis")
	}
	st, err := e.queue.Stats(ctx, clk.Now())
	if err != nil || st.Due != 0 || st.Inflight != 0 {
		t.Fatalf("queue stats %+v %v, want empty", st, err)
	}
	// Now, and a day later, it is still beyond the horizon: nothing to do.
	for _, at := range []time.Time{clk.Now(), dynT0.Add(24 * time.Hour), due.Add(-time.Hour - time.Millisecond)} {
		clk.Set(at)
		rep, err := e.ledger.Reconcile(ctx, clk.Now())
		if err != nil || rep.Total() != 0 || e.holds(t, w) {
			t.Fatalf("reconcile at %v: %+v %v, held %v; want nothing promoted yet", at, rep, err, e.holds(t, w))
		}
	}

	clk.Set(due.Add(-40 * time.Minute))
	rep, err := e.ledger.Reconcile(ctx, clk.Now())
	if err != nil || rep != (ledger.Reconciliation{Promoted: 1}) || rep.Total() != 0 {
		t.Fatalf("reconcile 40 min before due: %+v %v, want 1 promoted and no repair", rep, err)
	}
	if !e.holds(t, w) {
		t.Fatal("promoted withdrawal is not in Redis")
	}
	score, err := e.rdb.ZScore(ctx, e.queue.Keys(w.Shard).Due, w.ID).Result()
	if err != nil || int64(score) != due.UnixMilli() {
		t.Fatalf("due score %v (%v), want %d", int64(score), err, due.UnixMilli())
	}
	if rep, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil || rep.Total() != 0 {
		t.Fatalf("second pass repaired %+v (%v), want nothing", rep, err)
	}

	// One millisecond early: nothing; the claim reports when it falls due.
	early, err := e.queue.Claim(ctx, w.Shard, due.Add(-time.Millisecond), time.Minute, 10)
	if err != nil || len(early.Jobs) != 0 || !early.Next.Equal(due) {
		t.Fatalf("claim 1 ms early: %+v %v, want no job, next %v", early, err, due)
	}
	claim, err := e.queue.Claim(ctx, w.Shard, due, time.Minute, 10)
	if err != nil || len(claim.Jobs) != 1 || claim.Jobs[0].ID != w.ID || claim.Jobs[0].Due != due.UnixMilli() {
		t.Fatalf("claim at due: %+v %v, want %s due %d", claim, err, w.ID, due.UnixMilli())
	}
	clk.Set(due)
	if err := e.proc.Process(ctx, withdrawal.Ref{Shard: w.Shard, ID: w.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.queue.Ack(ctx, w.Shard, claim.Lease, w.ID); err != nil {
		t.Fatal(err)
	}
	w, err = e.svc.Get(ctx, "alice", w.ID)
	if err != nil || w.Status != withdrawal.Paid || w.Attempts != 1 || w.PayoutID != "po_"+w.ID || !w.ProcessedAt.Equal(due) || w.Untold() {
		t.Fatalf("after processing at due: %+v %v", w, err)
	}
	if calls := e.provider.count(w.ID); calls != 1 {
		t.Fatalf("provider called %d times, want 1", calls)
	}
	if msgs := e.finance.of(w.ID); len(msgs) != 1 || msgs[0].Status != withdrawal.Paid {
		t.Fatalf("finance got %+v", msgs)
	}
	if rep, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil || rep.Total() != 0 {
		t.Fatalf("reconcile after payout repaired %+v (%v), want nothing", rep, err)
	}
}

// TestDynamoCreateWhileRedisIsDown: the ledger write is the acceptance; a
// schedule that fails because Redis is down is logged, and the reconciler
// schedules the withdrawal once Redis is back. It is paid once.
func TestDynamoCreateWhileRedisIsDown(t *testing.T) {
	db := dynalitetest.Start(t)
	s := newDynStack(t, db)
	ctx := context.Background()

	s.redis.Kill()
	c, err := httpapi.CreateWithdrawal(ctx, s.a.Service, "alice", "down-1", []byte(`{"amount":"42.00","currency":"CNY","destination":"bank_6222","delay_seconds":0}`))
	if err != nil {
		t.Fatalf("create with Redis down: %v; the dynamodb ledger accepts without Redis", err)
	}
	var v httpapi.View
	if err := json.Unmarshal(httpapi.CreatedBody(c.Withdrawal), &v); err != nil || v.ID != c.ID || v.Status != withdrawal.Scheduled {
		t.Fatalf("response %s (%v)", httpapi.CreatedBody(c.Withdrawal), err)
	}
	w, err := s.a.Service.Get(ctx, "alice", c.ID)
	if err != nil || w.Status != withdrawal.Scheduled {
		t.Fatalf("ledger has %+v %v", w, err)
	}
	// The replay is answered from DynamoDB alone too.
	again, err := httpapi.CreateWithdrawal(ctx, s.a.Service, "alice", "down-1", []byte(`{"amount":"42.00","currency":"CNY","destination":"bank_6222","delay_seconds":0}`))
	if err != nil || !again.Replayed || again.ID != c.ID {
		t.Fatalf("replay with Redis down: %+v %v", again, err)
	}

	s.redis.Restart() // an empty Redis: it had nothing to keep
	held, err := s.a.Withdrawals.Holds(ctx, []delayq.Ref{{Shard: w.Shard, ID: w.ID}})
	if err != nil || held[0] {
		t.Fatalf("held %v %v before the reconciler ran; want not held", held, err)
	}
	// The next pass, past the grace a job due a moment ago gets (it could be in
	// the work queue), schedules it.
	rec, _, err := s.a.Reconcile(ctx, time.Now().Add(2*time.Second))
	if err != nil || rec != (ledger.Reconciliation{Scheduled: 1}) {
		t.Fatalf("reconcile: %+v %v, want 1 scheduled", rec, err)
	}

	pctx, stop := context.WithCancel(ctx)
	var stats pipelineStats
	wait := s.run(pctx, t, time.Second, &stats)
	waitFor := time.Now().Add(30 * time.Second)
	for len(s.finance.Of(c.ID)) == 0 && time.Now().Before(waitFor) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wait()
	if calls, paid := s.provider.Calls(c.ID); !paid || calls != 1 {
		t.Fatalf("provider: %d calls, paid %v; want paid with one call", calls, paid)
	}
	if msgs := s.finance.Of(c.ID); len(msgs) != 1 || msgs[0].Status != withdrawal.Paid {
		t.Fatalf("finance got %+v", msgs)
	}
	if w, err := s.a.Service.Get(ctx, "alice", c.ID); err != nil || w.Status != withdrawal.Paid || w.PayoutID != "po_"+c.ID {
		t.Fatalf("ledger ends %+v %v", w, err)
	}
	if s.provider.Paid() != 1 {
		t.Fatalf("provider paid %d keys, want 1", s.provider.Paid())
	}
}

// failingKeyCompletion is DynamoDB with the idempotency key's completion
// failing: the write that follows the withdrawal record in Create.
type failingKeyCompletion struct {
	ledger.DynamoAPI
	table string
}

var errInjected = errors.New("injected: connection reset by peer")

func (f failingKeyCompletion) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName != nil && *in.TableName == f.table {
		return nil, errInjected
	}
	return f.DynamoAPI.UpdateItem(ctx, in, opts...)
}

// crashedLedger is a process that dies inside Create: whatever Create wrote
// stays, and no clean-up (Release) runs.
type crashedLedger struct{ *ledger.Dynamo }

func (crashedLedger) Release(context.Context, withdrawal.IdemKey, string, bool) error { return nil }

// TestDynamoCrashAfterRecordBeforeKeyCompletion: a create wrote the
// withdrawal record and died before completing its idempotency key (and
// before scheduling). The client's retry with the same key, once the key's
// lock has passed, takes the reservation over and completes the very same
// withdrawal: one withdrawal, paid once.
func TestDynamoCrashAfterRecordBeforeKeyCompletion(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()
	body := []byte(`{"amount":"77.70","currency":"CNY","destination":"bank_6222","delay_seconds":60}`)

	dying := crashedLedger{ledger.NewDynamo(failingKeyCompletion{db.Client(), e.tables.Idempotency}, e.tables, e.queue,
		ledger.DynamoOptions{Logger: discardLogger()})}
	if _, err := httpapi.CreateWithdrawal(ctx, e.service(t, dying), "alice", "crash-1", body); !errors.Is(err, errInjected) {
		t.Fatalf("dying create: %v, want the injected failure", err)
	}
	page, err := e.svc.List(ctx, "alice", 10, "")
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("after the crash alice has %d withdrawals (%v), want the 1 written", len(page.Items), err)
	}
	orphan := page.Items[0]
	if e.holds(t, orphan) {
		t.Fatal("the crashed create scheduled it; the crash was meant to come first")
	}

	// The retry while the dead request's lock holds: in flight (409).
	if _, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "crash-1", body); !errors.Is(err, withdrawal.ErrIdempotencyInFlight) {
		t.Fatalf("retry within the lock: %v, want ErrIdempotencyInFlight", err)
	}
	clk.Advance(withdrawal.DefaultKeyLock + time.Second)
	c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "crash-1", body)
	if err != nil || c.Replayed || c.ID != orphan.ID {
		t.Fatalf("retry after the lock: %+v %v, want the crashed create's withdrawal %s", c, err, orphan.ID)
	}
	again, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "crash-1", body)
	if err != nil || !again.Replayed || again.ID != orphan.ID || string(httpapi.CreatedBody(again.Withdrawal)) != string(httpapi.CreatedBody(c.Withdrawal)) {
		t.Fatalf("replay: %+v %v", again, err)
	}
	page, err = e.svc.List(ctx, "alice", 10, "")
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("alice has %d withdrawals (%v), want 1", len(page.Items), err)
	}
	if !e.holds(t, orphan) {
		t.Fatal("the completed retry did not schedule the withdrawal")
	}
	if rep, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil || rep.Total() != 0 {
		t.Fatalf("reconcile repaired %+v (%v), want nothing", rep, err)
	}

	// Past its due time (see TestDynamoCrashRetryAnswersTheStoredRecord for
	// which due time the retry schedules).
	clk.Advance(2 * time.Minute)
	if n := e.drainAt(t); n != 1 {
		t.Fatalf("processed %d jobs at due, want 1", n)
	}
	w, err := e.svc.Get(ctx, "alice", orphan.ID)
	if err != nil || w.Status != withdrawal.Paid || w.Attempts != 1 {
		t.Fatalf("ends %+v %v", w, err)
	}
	if e.provider.count(orphan.ID) != 1 || e.provider.keys() != 1 || len(e.finance.of(orphan.ID)) != 1 {
		t.Fatalf("provider %d calls over %d keys, finance %d messages; want 1, 1, 1",
			e.provider.count(orphan.ID), e.provider.keys(), len(e.finance.of(orphan.ID)))
	}
}

// TestDynamoFailedKeyCompletionMakesOneWithdrawal: the same failure as a
// crash, but the request lives to answer it: the key's completion after the
// record write fails (a timeout or throttle from DynamoDB), the client gets
// an error (503) and retries with the same key. It must still end with one
// withdrawal paid once, not two.
func TestDynamoFailedKeyCompletionMakesOneWithdrawal(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()
	body := []byte(`{"amount":"77.70","currency":"CNY","destination":"bank_6222","delay_seconds":60}`)

	flaky := ledger.NewDynamo(failingKeyCompletion{db.Client(), e.tables.Idempotency}, e.tables, e.queue,
		ledger.DynamoOptions{Logger: discardLogger()})
	if _, err := httpapi.CreateWithdrawal(ctx, e.service(t, flaky), "alice", "flaky-1", body); !errors.Is(err, errInjected) {
		t.Fatalf("failing create: %v, want the injected failure", err)
	}
	// The client retries its request with the same key.
	clk.Advance(time.Second)
	c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "flaky-1", body)
	if err != nil && !errors.Is(err, withdrawal.ErrIdempotencyInFlight) {
		t.Fatal(err)
	}
	if err != nil { // in flight: retry after the lock
		clk.Advance(withdrawal.DefaultKeyLock)
		if c, err = httpapi.CreateWithdrawal(ctx, e.svc, "alice", "flaky-1", body); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever Redis holds, the reconciler makes the ledger's word true.
	if _, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	e.drainAt(t)
	page, err := e.svc.List(ctx, "alice", 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var desc []string
	for _, w := range page.Items {
		desc = append(desc, fmt.Sprintf("%s %s (provider calls %d)", w.ID, w.Status, e.provider.count(w.ID)))
	}
	if len(page.Items) != 1 || page.Items[0].ID != c.ID || e.provider.keys() != 1 {
		t.Fatalf("one request under key flaky-1 made %d withdrawals, %d paid: %v (the retry answered %s)",
			len(page.Items), e.provider.keys(), desc, c.ID)
	}
}

// TestDynamoCrashRetryAnswersTheStoredRecord: after the crash above, the
// retry that takes the reservation over completes the withdrawal the crashed
// request wrote; its answer (stored under the key and replayed) and its
// schedule in Redis must be that record's, so that the client, GET and the
// payout agree on when it is due.
func TestDynamoCrashRetryAnswersTheStoredRecord(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()
	body := []byte(`{"amount":"77.70","currency":"CNY","destination":"bank_6222","delay_seconds":60}`)

	dying := crashedLedger{ledger.NewDynamo(failingKeyCompletion{db.Client(), e.tables.Idempotency}, e.tables, e.queue,
		ledger.DynamoOptions{Logger: discardLogger()})}
	if _, err := httpapi.CreateWithdrawal(ctx, e.service(t, dying), "alice", "crash-2", body); !errors.Is(err, errInjected) {
		t.Fatalf("dying create: %v, want the injected failure", err)
	}
	page, err := e.svc.List(ctx, "alice", 10, "")
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("after the crash alice has %d withdrawals (%v), want 1", len(page.Items), err)
	}
	stored := page.Items[0]
	clk.Advance(withdrawal.DefaultKeyLock + time.Second)
	c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "crash-2", body)
	if err != nil || c.ID != stored.ID {
		t.Fatalf("retry after the lock: %+v %v, want %s", c, err, stored.ID)
	}
	var v httpapi.View
	if err := json.Unmarshal(httpapi.CreatedBody(c.Withdrawal), &v); err != nil {
		t.Fatal(err)
	}
	got, err := e.svc.Get(ctx, "alice", stored.ID)
	if err != nil {
		t.Fatal(err)
	}
	score, err := e.rdb.ZScore(ctx, e.queue.Keys(stored.Shard).Due, stored.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	if v.DueAt != clock.Format(got.DueAt) || v.CreatedAt != clock.Format(got.CreatedAt) || int64(score) != got.DueAt.UnixMilli() {
		t.Fatalf("the retry answered due_at %s created_at %s and scheduled at %s; the ledger says due_at %s created_at %s",
			v.DueAt, v.CreatedAt, clock.Format(clock.FromMillis(int64(score))), clock.Format(got.DueAt), clock.Format(got.CreatedAt))
	}
}

// TestDynamoReconcileRepairsMoreThanAPage: Redis loses more outstanding
// withdrawals than one page of the reconciler's index query (200): one pass
// puts every one back, and leaves those beyond the horizon in the ledger.
func TestDynamoReconcileRepairsMoreThanAPage(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()
	const near, far = 450, 20
	var (
		mu  sync.Mutex
		ids = map[string]withdrawal.Withdrawal{}
		wg  sync.WaitGroup
	)
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < near+far; i += 4 {
				delay := 60 + i%300 // within the horizon
				if i >= near {
					delay = 2*3600 + i
				}
				user := fmt.Sprintf("user-%d", i%23)
				c, err := httpapi.CreateWithdrawal(ctx, e.svc, user, fmt.Sprintf("k-%d", i),
					[]byte(fmt.Sprintf(`{"amount":"500","currency":"JPY","destination":"d%d","delay_seconds":%d}`, i, delay)))
				if err != nil {
					t.Errorf("create %d: %v", i, err)
					return
				}
				w, err := e.svc.Get(ctx, user, c.ID)
				if err != nil {
					t.Errorf("get %s: %v", c.ID, err)
					return
				}
				mu.Lock()
				ids[c.ID] = w
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if st, err := e.queue.Stats(ctx, clk.Now()); err != nil || st.Due != near {
		t.Fatalf("queue holds %+v (%v), want %d due", st, err, near)
	}
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := e.ledger.Reconcile(ctx, clk.Now())
	if err != nil || rep != (ledger.Reconciliation{Scheduled: near}) {
		t.Fatalf("reconcile after FLUSHALL: %+v %v, want %d scheduled", rep, err, near)
	}
	for id, w := range ids {
		score, err := e.rdb.ZScore(ctx, e.queue.Keys(w.Shard).Due, id).Result()
		if w.DueAt.After(clk.Now().Add(time.Hour)) {
			if err != redis.Nil {
				t.Errorf("%s due %v beyond the horizon is in Redis", id, w.DueAt)
			}
			continue
		}
		if err != nil || int64(score) != w.DueAt.UnixMilli() {
			t.Errorf("%s: score %v (%v), want %d", id, int64(score), err, w.DueAt.UnixMilli())
		}
	}
	if rep, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil || rep.Total() != 0 {
		t.Fatalf("second pass repaired %+v (%v), want nothing", rep, err)
	}
}

// TestDynamoRescheduleAcrossTheHorizon: a withdrawal moved beyond the
// horizon leaves Redis (the old time never fires) and is promoted nearer
// its new time; one moved from beyond it into it is scheduled at once.
func TestDynamoRescheduleAcrossTheHorizon(t *testing.T) {
	db := dynalitetest.Start(t)
	clk := clock.NewFake(dynT0)
	e := newDynLedgerEnv(t, db, clk, nil)
	ctx := context.Background()
	c, err := httpapi.CreateWithdrawal(ctx, e.svc, "alice", "k", []byte(`{"amount":"1.00","currency":"EUR","destination":"d","delay_seconds":60}`))
	if err != nil {
		t.Fatal(err)
	}
	far := dynT0.Add(48*time.Hour + 5*time.Millisecond)
	w, err := httpapi.RescheduleWithdrawal(ctx, e.svc, "alice", c.ID, []byte(fmt.Sprintf(`{"process_at":%q}`, clock.Format(far))), c.ETag())
	if err != nil || !w.DueAt.Equal(far) {
		t.Fatalf("reschedule beyond the horizon: %+v %v", w, err)
	}
	if e.holds(t, w) {
		t.Fatal("a withdrawal moved two days ahead is still in Redis")
	}
	clk.Set(far.Add(-30 * time.Minute))
	if rep, err := e.ledger.Reconcile(ctx, clk.Now()); err != nil || rep != (ledger.Reconciliation{Promoted: 1}) || !e.holds(t, w) {
		t.Fatalf("reconcile near the new time: %+v %v, want it promoted", rep, err)
	}
	near := clk.Now().Add(time.Minute)
	clk.Set(dynT0)
	c2, err := httpapi.CreateWithdrawal(ctx, e.svc, "bob", "k", []byte(fmt.Sprintf(`{"amount":"1.00","currency":"EUR","destination":"d","process_at":%q}`,
		clock.Format(dynT0.Add(72*time.Hour)))))
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(near.Add(-time.Minute))
	w2, err := httpapi.RescheduleWithdrawal(ctx, e.svc, "bob", c2.ID, []byte(fmt.Sprintf(`{"process_at":%q}`, clock.Format(near))), "")
	if err != nil || !e.holds(t, w2) {
		t.Fatalf("reschedule into the horizon: %+v %v, held %v", w2, err, e.holds(t, w2))
	}
	if score, err := e.rdb.ZScore(ctx, e.queue.Keys(w2.Shard).Due, w2.ID).Result(); err != nil || int64(score) != near.UnixMilli() {
		t.Fatalf("due score %v (%v), want %d", int64(score), err, near.UnixMilli())
	}
}
