// Package modelcheck_test holds the model-based checker of the withdrawal
// lifecycle: a rapid state machine drives the real service, the real payout
// step and the real ledger (both backends) against a model of the payout
// provider, with faults of every party interleaved, and checks after every
// step that the ledger never contradicts the provider's truth.
package modelcheck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	"github.com/hourglass/hourglass/internal/lostreply"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Settings of the world under test, in fake time.
const (
	maxAttempts    = 3
	retryBase      = 10 * time.Second
	retryCap       = time.Minute
	attemptTimeout = 30 * time.Second
	lease          = 30 * time.Second
	window         = 2 * time.Hour // the provider's idempotency window, and ours
)

var (
	t0      = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	secret  = []byte("model-secret")
	errDied = errors.New("model: the consumer died")
	users   = []string{"ann", "bob", "cy"}
)

// death is where the consumer handling the current delivery dies.
type death int

const (
	lives        death = iota
	afterBegin         // the attempt began, nothing was sent
	inCall             // the provider acted on the request, nothing was recorded
	beforeRecord       // the answer came; the consumer stalls and records it much later
)

// fate is the ledger as the dying consumer sees it: after its death every
// call fails, and a stalled consumer's write is kept to be made late.
type fate struct {
	withdrawal.Ledger
	w *world
}

func (f fate) dead() bool { return f.w.dying != lives && f.w.dead.Load() }

func (f fate) Begin(ctx context.Context, ref withdrawal.Ref, b withdrawal.Begin) (withdrawal.Withdrawal, withdrawal.Start, error) {
	if f.dead() {
		return withdrawal.Withdrawal{}, 0, errDied
	}
	before, ferr := f.Find(ctx, ref.ID)
	got, start, err := f.Ledger.Begin(ctx, ref, b)
	if err == nil && start == withdrawal.StartAttempt && ferr == nil &&
		(before.Status == withdrawal.Scheduled || before.Status == withdrawal.Retrying) {
		// Never early: an attempt starts no sooner than the record's due
		// time (the last reschedule answered 200, or the retry's); a
		// delivery that does not say what it was claimed for is allowed
		// the ledger's clock skew, as before reschedules.
		limit := before.DueAt
		if b.Claimed.IsZero() {
			limit = limit.Add(-ledger.ClockSkew)
		}
		if b.Now.Before(limit) {
			f.w.early = append(f.w.early, fmt.Sprintf("%s began at %s, due %s (claimed for %s)", ref.ID,
				b.Now.Sub(t0), before.DueAt.Sub(t0), b.Claimed.Sub(t0)))
		}
	}
	if err == nil && start == withdrawal.StartAttempt && f.w.dying == afterBegin {
		f.w.dead.Store(true)
		return withdrawal.Withdrawal{}, 0, errDied
	}
	return got, start, err
}

func (f fate) Send(ctx context.Context, ref withdrawal.Ref, attempt string, now time.Time, neverReceived bool) (withdrawal.Withdrawal, error) {
	if f.dead() {
		return withdrawal.Withdrawal{}, errDied
	}
	return f.Ledger.Send(ctx, ref, attempt, now, neverReceived)
}

func (f fate) stall(write func() error) error {
	f.w.held = append(f.w.held, write)
	f.w.dead.Store(true)
	return errDied
}

func (f fate) Finish(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.Result) (withdrawal.Withdrawal, error) {
	if f.dead() {
		return withdrawal.Withdrawal{}, errDied
	}
	if f.w.dying == beforeRecord {
		return withdrawal.Withdrawal{}, f.stall(func() error {
			_, err := f.Ledger.Finish(context.Background(), ref, attempt, r)
			return err
		})
	}
	return f.Ledger.Finish(ctx, ref, attempt, r)
}

func (f fate) Retry(ctx context.Context, ref withdrawal.Ref, attempt string, r withdrawal.RetryAt) (withdrawal.Withdrawal, error) {
	if f.dead() {
		return withdrawal.Withdrawal{}, errDied
	}
	if f.w.dying == beforeRecord {
		return withdrawal.Withdrawal{}, f.stall(func() error {
			_, err := f.Ledger.Retry(context.Background(), ref, attempt, r)
			return err
		})
	}
	return f.Ledger.Retry(ctx, ref, attempt, r)
}

func (f fate) MarkNotified(ctx context.Context, ref withdrawal.Ref, status withdrawal.Status) error {
	if f.dead() {
		return errDied
	}
	return f.Ledger.MarkNotified(ctx, ref, status)
}

// finance records what it is told; it may be down.
type finance struct {
	w    *world
	mu   sync.Mutex
	told map[string][]withdrawal.Status
	down int
}

func (f *finance) Notify(_ context.Context, m withdrawal.Processed) error {
	if f.w.dying != lives && f.w.dead.Load() {
		return errDied
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down > 0 {
		f.down--
		return errors.New("model: finance is down")
	}
	f.told[m.WithdrawalID] = append(f.told[m.WithdrawalID], m.Status)
	return nil
}

// backend builds the ledger of one run on rdb.
type backend struct {
	name string
	// open returns the ledger of a fresh run and what clears it after.
	open func(rdb *redis.Client, q *delayq.Queue, lose *lostreply.Switch) (withdrawal.Ledger, func(), error)
}

// world is one run: the real parts, the provider's truth, and what the
// model knows of what clients were told.
type world struct {
	t    *rapid.T
	clk  *clock.Fake
	rdb  *redis.Client
	lose *lostreply.Switch
	q    *delayq.Queue
	led  withdrawal.Ledger
	svc  *withdrawal.Service
	proc *withdrawal.Processor
	prov *provider
	fin  *finance

	dying death
	dead  atomic.Bool // set from the provider's goroutine when it dies in the call
	held  []func() error
	// sqs holds the messages handed to the work queue and not done with.
	sqs  []delayq.Job
	ids  []string
	user map[string]string
	// cancelled: a cancel the API answered 200.
	cancelled map[string]bool
	// early lists attempts that began before their record's due time.
	early     []string
	lookupsOn bool
	steps     int
	stats     *runStats
	close     func()
	// trace says what each step did, for a failing run's report.
	trace []string
}

// logf adds a line to the run's trace.
func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%4d %8s  ", w.steps, w.now().Sub(t0).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// fatalf fails the run with the trace of how it got there.
func (w *world) fatalf(t *rapid.T, format string, args ...any) {
	t.Helper()
	t.Fatalf("%s\ntrace:\n  %s\nstate:%s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "), w.summary())
}

// runStats adds up what the runs of one backend did.
type runStats struct {
	mu     sync.Mutex
	runs   int
	steps  int
	states map[string]bool
	acts   map[string]int
}

func (s *runStats) seen(state string, act string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[state] = true
	if act != "" {
		s.acts[act]++
	}
}

type env struct {
	rdb  *redis.Client
	lose *lostreply.Switch
	prov *provider
	be   backend
}

func newWorld(rt *rapid.T, e env, stats *runStats) *world {
	ctx := context.Background()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		rt.Fatal(err)
	}
	e.lose.Disarm()
	clk := clock.NewFake(t0)
	e.prov.reset(clk)
	w := &world{t: rt, clk: clk, rdb: e.rdb, lose: e.lose, prov: e.prov, user: map[string]string{},
		cancelled: map[string]bool{}, stats: stats}
	w.fin = &finance{w: w, told: map[string][]withdrawal.Status{}}
	q, err := delayq.New(e.rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		rt.Fatal(err)
	}
	w.q = q
	w.led, w.close, err = e.be.open(e.rdb, q, e.lose)
	if err != nil {
		rt.Fatal(err)
	}
	w.svc, err = withdrawal.NewService(withdrawal.Config{
		Ledger: w.led, Clock: clk, ShardFor: q.ShardFor, Logger: quiet,
		Rules: withdrawal.Rules{Currencies: []string{"USD"}, MaxAmount: decimal.NewFromInt(1000),
			DefaultDelay: 0, MaxDelay: 24 * time.Hour},
	})
	if err != nil {
		rt.Fatal(err)
	}
	w.lookupsOn = rapid.Bool().Draw(rt, "lookups")
	client, err := payout.New(payout.Config{URL: e.prov.srv.URL, Secret: secret, Timeout: 150 * time.Millisecond,
		Clock: clk, NoLookup: !w.lookupsOn})
	if err != nil {
		rt.Fatal(err)
	}
	jitter := rand.New(rand.NewPCG(rapid.Uint64().Draw(rt, "seed"), 1))
	var mu sync.Mutex
	w.proc, err = withdrawal.NewProcessor(withdrawal.ProcessorConfig{
		Ledger: fate{Ledger: w.led, w: w}, Provider: client, Notifier: w.fin, Clock: clk, Logger: quiet,
		MaxAttempts: maxAttempts, RetryBase: retryBase, RetryCap: retryCap, AttemptTimeout: attemptTimeout,
		IdempotencyWindow: window,
		Jitter: func(n time.Duration) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return time.Duration(jitter.Int64N(int64(n) + 1))
		},
	})
	if err != nil {
		rt.Fatal(err)
	}
	return w
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func (w *world) now() time.Time { return w.clk.Now() }

// armLoss may make the next ledger write lose its answer.
func (w *world) armLoss(label string) {
	switch rapid.IntRange(0, 5).Draw(w.t, label) {
	case 0:
		w.lose.Arm(lostreply.Resend)
	case 1:
		w.lose.Arm(lostreply.Fail)
	}
}

func (w *world) pick(label string) (string, bool) {
	if len(w.ids) == 0 {
		return "", false
	}
	return w.ids[rapid.IntRange(0, len(w.ids)-1).Draw(w.t, label)], true
}

func (w *world) ref(id string) withdrawal.Ref {
	return withdrawal.Ref{Shard: w.q.ShardFor(w.user[id]), ID: id}
}

// ---- actions ----

func (w *world) create(t *rapid.T) {
	user := rapid.SampledFrom(users).Draw(t, "user")
	delay := rapid.SampledFrom([]int{0, 5, 300}).Draw(t, "delay")
	body := fmt.Sprintf(`{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":%d}`, delay)
	key := fmt.Sprintf("k-%d", w.steps)
	w.armLoss("create-loss")
	// An unknown answer is retried with the same key, as the app does.
	for range 4 {
		c, err := httpapi.CreateWithdrawal(context.Background(), w.svc, user, key, []byte(body))
		w.logf("create %s delay %ds: %s %v", user, delay, c.ID, err)
		if err == nil {
			if !slices.Contains(w.ids, c.ID) {
				w.ids = append(w.ids, c.ID)
				w.user[c.ID] = user
			}
			return
		}
		if !errors.Is(err, lostreply.ErrLost) && !errors.Is(err, withdrawal.ErrIdempotencyInFlight) {
			t.Fatalf("create: %v", err)
		}
	}
	// Still unknown: it may exist; the reconciler and the checks see it.
	w.lose.Disarm()
}

func (w *world) cancel(t *rapid.T) {
	id, ok := w.pick("cancel-id")
	if !ok {
		t.Skip("nothing to cancel")
	}
	w.armLoss("cancel-loss")
	got, err := w.svc.Cancel(context.Background(), w.user[id], id)
	w.lose.Disarm()
	w.logf("cancel %s: %s %v", id, got.Status, err)
	switch {
	case err == nil && got.Status == withdrawal.Cancelled:
		w.cancelled[id] = true
	case err == nil, errors.Is(err, withdrawal.ErrNotCancellable), errors.Is(err, lostreply.ErrLost):
	default:
		t.Fatalf("cancel: %v", err)
	}
}

// reschedule moves a withdrawal as its owner, to a time a moment to minutes
// away, with no If-Match, the current ETag or a stale one.
func (w *world) reschedule(t *rapid.T) {
	id, ok := w.pick("reschedule-id")
	if !ok {
		t.Skip("nothing to reschedule")
	}
	ctx := context.Background()
	cur, err := w.led.Find(ctx, id)
	if err != nil {
		t.Skip("not stored") // a create whose answer was lost may not have landed
	}
	body := rapid.SampledFrom([]string{`{"delay_seconds":0}`, `{"delay_seconds":1}`, `{"delay_seconds":300}`,
		fmt.Sprintf(`{"process_at":%q}`, clock.Format(w.now().Add(300*time.Millisecond))),
		fmt.Sprintf(`{"process_at":%q}`, clock.Format(w.now().Add(1500*time.Millisecond))),
		fmt.Sprintf(`{"process_at":%q}`, clock.Format(w.now().Add(90*time.Second+7*time.Millisecond)))}).Draw(t, "reschedule-to")
	match := rapid.SampledFrom([]string{"", "current", "stale"}).Draw(t, "if-match")
	ifMatch := map[string]string{"": "", "current": cur.ETag(), "stale": withdrawal.ETagOf(id, cur.Revision-1)}[match]
	w.armLoss("reschedule-loss")
	got, err := httpapi.RescheduleWithdrawal(ctx, w.svc, w.user[id], id, []byte(body), ifMatch)
	w.lose.Disarm()
	w.logf("reschedule %s to %s (if-match %s): %s due %s %v", id, body, match, got.Status, got.DueAt.Sub(t0), err)
	after, ferr := w.led.Find(ctx, id)
	if ferr != nil {
		t.Fatalf("find %s: %v", id, ferr)
	}
	switch {
	case err == nil:
		if match == "stale" {
			w.fatalf(t, "a stale If-Match was admitted: %s", id)
		}
		if !after.DueAt.Equal(got.DueAt) || after.Revision != got.Revision {
			w.fatalf(t, "a 200 for due %s, the record says %s", got.DueAt.Sub(t0), after.DueAt.Sub(t0))
		}
	case errors.Is(err, withdrawal.ErrNotReschedulable):
		if got.Reschedulable() || cur.Reschedulable() {
			w.fatalf(t, "409 for %s, which could move (%s maybe=%v)", id, got.Status, got.MaybePaid)
		}
	case errors.Is(err, withdrawal.ErrPreconditionFailed):
		if match != "stale" {
			w.fatalf(t, "412 for %s with If-Match %q", id, match)
		}
	case errors.Is(err, lostreply.ErrLost):
	default:
		t.Fatalf("reschedule: %v", err)
	}
}

// poll claims what is due and hands it to the work queue (the AWS wiring:
// acked as soon as the work queue has it); crash claims and dies before
// handing over, so the jobs wait for their lease to expire.
func (w *world) poll(crash bool) {
	ctx := context.Background()
	for n := range w.q.Shards() {
		c, err := w.q.Claim(ctx, n, w.now(), lease, 100)
		if err != nil {
			w.t.Fatalf("claim: %v", err)
		}
		if len(c.Jobs) > 0 || c.Reaped > 0 {
			w.logf("poll shard %d (crash %v): %d jobs, %d reaped", n, crash, len(c.Jobs), c.Reaped)
		}
		if crash || len(c.Jobs) == 0 {
			continue
		}
		w.sqs = append(w.sqs, c.Jobs...)
		if _, err := w.q.AckLease(ctx, n, c.Lease); err != nil {
			w.t.Fatalf("ack: %v", err)
		}
	}
}

func (w *world) deliver(t *rapid.T) {
	if len(w.sqs) == 0 {
		t.Skip("no message")
	}
	i := rapid.IntRange(0, len(w.sqs)-1).Draw(t, "message")
	job := w.sqs[i]
	dup := rapid.IntRange(0, 4).Draw(t, "duplicate") == 0 // SQS delivers it again later too
	err := w.process(t, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, time.UnixMilli(job.Due).UTC())
	if err == nil && !dup {
		w.sqs = slices.Delete(w.sqs, i, i+1)
	}
}

// stray delivers a job nobody scheduled (a stale duplicate, an early one).
func (w *world) stray(t *rapid.T) {
	id, ok := w.pick("stray-id")
	if !ok {
		t.Skip("nothing")
	}
	_ = w.process(t, w.ref(id), time.Time{})
}

// process runs the payout step for one delivery, with the provider's
// answers, a possible death of the consumer and lost ledger answers drawn.
func (w *world) process(t *rapid.T, ref withdrawal.Ref, claimed time.Time) error {
	n := rapid.IntRange(0, 2).Draw(t, "posts")
	posts := make([]behavior, n)
	for i := range posts {
		posts[i] = behavior(rapid.IntRange(0, int(behaviors)-1).Draw(t, "post"))
	}
	looks := make([]lookupBehavior, rapid.IntRange(0, 1).Draw(t, "looks"))
	for i := range looks {
		looks[i] = lookupBehavior(rapid.IntRange(0, int(lookups)-1).Draw(t, "look"))
	}
	if d := rapid.IntRange(0, 7).Draw(t, "death"); d <= int(beforeRecord) {
		w.dying = death(d)
	}
	w.dead.Store(false)
	var onCall func()
	if w.dying == inCall {
		onCall = func() { w.dead.Store(true) }
	}
	w.prov.script(posts, looks, onCall)
	w.armLoss("process-loss")
	lost := w.lose.Lost()
	err := w.proc.ProcessClaimed(context.Background(), ref, claimed)
	w.logf("process %s: posts %v looks %v death %d lost %d: %v", ref.ID, posts, looks, w.dying, w.lose.Lost()-lost, err)
	w.lose.Disarm()
	w.prov.script(nil, nil, nil)
	w.dying = lives
	w.dead.Store(false)
	if err != nil && !errors.Is(err, errDied) && !errors.Is(err, lostreply.ErrLost) &&
		!strings.Contains(err.Error(), "finance is down") && !strings.Contains(err.Error(), "model:") {
		t.Fatalf("process %s: %v", ref.ID, err)
	}
	return err
}

func (w *world) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Second, retryBase, attemptTimeout + time.Second, 10 * time.Minute,
		window + time.Minute}).Draw(t, "advance")
	w.clk.Advance(d)
	w.logf("advance %s", d)
}

type reconciler interface {
	Reconcile(ctx context.Context, now time.Time) (ledger.Reconciliation, error)
}

func (w *world) reconcile(t *rapid.T) {
	w.armLoss("reconcile-loss")
	rep, err := w.led.(reconciler).Reconcile(context.Background(), w.now())
	w.lose.Disarm()
	w.logf("reconcile: %+v %v", rep, err)
	if err != nil && !errors.Is(err, lostreply.ErrLost) {
		t.Fatalf("reconcile: %v", err)
	}
}

func (w *world) callback(t *rapid.T) {
	evs := w.prov.allEvents()
	if len(evs) == 0 {
		t.Skip("no event")
	}
	ev := evs[rapid.IntRange(0, len(evs)-1).Draw(t, "event")]
	w.armLoss("callback-loss")
	w.send(t, ev)
	w.lose.Disarm()
}

// send delivers a signed callback. One about a withdrawal never sent to
// the provider must be refused (ErrNotSent) and change nothing; one about
// a withdrawal sent is never refused so (nothing makes it unsent).
func (w *world) send(t *rapid.T, ev event) {
	body := fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":%q,"status":%q,"reason":"model"}`,
		ev.ID, ev.Withdrawal, ev.PayoutID, ev.Status)
	before, ferr := w.led.Find(context.Background(), ev.Withdrawal)
	got, err := httpapi.ApplyCallback(context.Background(), w.svc, []byte(body))
	w.logf("callback %s %s %s: %s %v", ev.ID, ev.Withdrawal, ev.Status, got.Applied, err)
	if err != nil &&
		!errors.Is(err, lostreply.ErrLost) && !errors.Is(err, withdrawal.ErrNotFound) && !errors.Is(err, withdrawal.ErrNotSent) {
		t.Fatalf("callback %s: %v", body, err)
	}
	if ferr != nil {
		return
	}
	never := before.NeverSent()
	switch {
	case never && err == nil:
		w.fatalf(t, "a callback about a withdrawal never sent was taken (%s): %+v", got.Applied, before)
	case !never && errors.Is(err, withdrawal.ErrNotSent):
		w.fatalf(t, "a callback about a withdrawal sent was refused as never sent: %+v", before)
	case never:
		after, aerr := w.led.Find(context.Background(), ev.Withdrawal)
		if aerr != nil || after.Revision != before.Revision || after.Status != before.Status || after.Op != before.Op {
			w.fatalf(t, "a refused callback changed a withdrawal never sent: %+v -> %+v %v", before, after, aerr)
		}
	}
}

// forgedCallback is a signed callback about a withdrawal that the provider
// never received (a provider's bug, a misrouted event): about one never
// sent it must be refused and change nothing (send checks it).
func (w *world) forgedCallback(t *rapid.T) {
	var never []string
	for _, id := range w.ids {
		if rec, err := w.led.Find(context.Background(), id); err == nil && rec.NeverSent() && !w.prov.truth(id).received {
			never = append(never, id)
		}
	}
	if len(never) == 0 {
		t.Skip("every withdrawal was sent")
	}
	id := rapid.SampledFrom(never).Draw(t, "never-sent")
	st := rapid.SampledFrom([]string{"paid", "failed", "returned"}).Draw(t, "forged-status")
	w.armLoss("forged-callback-loss")
	w.send(t, event{ID: "forged-" + id + "-" + st, Withdrawal: id, Status: st, PayoutID: "po_forged"})
	w.lose.Disarm()
}

func (w *world) providerSettles(t *rapid.T) {
	p := w.prov.pending()
	if len(p) == 0 {
		t.Skip("nothing pending")
	}
	sort.Strings(p)
	id, pays := rapid.SampledFrom(p).Draw(t, "pending"), rapid.Bool().Draw(t, "pays")
	w.prov.settle(id, pays)
	w.logf("provider settles %s, pays %v", id, pays)
}

func (w *world) providerReturns(t *rapid.T) {
	id, ok := w.pick("return-id")
	if !ok || !w.prov.giveBack(id) {
		t.Skip("nothing paid")
	}
	w.logf("provider: %s returned", id)
}

// resolve is an operator settling a withdrawal by the provider's truth (as
// read on its dashboard), when that truth is definitive.
func (w *world) resolve(t *rapid.T, id string) {
	tr := w.prov.truth(id)
	r := withdrawal.Resolution{Status: withdrawal.Failed, Reason: "not at the provider", By: "model-operator"}
	switch {
	case tr.paid():
		r = withdrawal.Resolution{Status: withdrawal.Paid, PayoutID: tr.payoutID, By: "model-operator"}
	case tr.status == "pending":
		return
	}
	r.MaxAttempts = maxAttempts
	before, ferr := w.led.Find(context.Background(), id)
	if ferr != nil {
		w.logf("operator cannot read %s: %v", id, ferr)
		return
	}
	r.IfRevision = &before.Revision
	_, err := w.svc.Resolve(context.Background(), id, r)
	w.logf("operator resolves %s %s: %v", id, r.Status, err)
	if err != nil &&
		!errors.Is(err, withdrawal.ErrNotResolvable) && !errors.Is(err, lostreply.ErrLost) {
		t.Fatalf("resolve %s: %v", id, err)
	}
	if before.NeverSent() {
		after, aerr := w.led.Find(context.Background(), id)
		if err == nil || aerr != nil || after.Revision != before.Revision || after.Status != before.Status {
			w.fatalf(t, "an operator's resolution of a withdrawal never sent: %v, %+v -> %+v %v", err, before, after, aerr)
		}
	}
}

func (w *world) resume(t *rapid.T) {
	if len(w.held) == 0 {
		t.Skip("nobody stalled")
	}
	i := rapid.IntRange(0, len(w.held)-1).Draw(t, "held")
	write := w.held[i]
	w.held = slices.Delete(w.held, i, i+1)
	err := write()
	w.logf("a stalled consumer records its result: %v", err)
	if err != nil && !errors.Is(err, withdrawal.ErrStale) {
		t.Fatalf("a stalled consumer's late write: %v", err)
	}
}

// ---- invariants ----

// check holds after every step: the ledger never contradicts the money.
func (w *world) check(t *rapid.T) {
	w.steps++
	if len(w.early) > 0 {
		w.fatalf(t, "paid early: %s", strings.Join(w.early, "; "))
	}
	var state []string
	for _, id := range w.ids {
		rec, err := w.led.Find(context.Background(), id)
		if err != nil {
			w.fatalf(t, "find %s: %v", id, err)
		}
		tr := w.prov.truth(id)
		told := w.fin.toldOf(id)
		where := fmt.Sprintf("%s (ledger %s maybe=%v attempts=%d told=%v; provider %+v)", id, rec.Status, rec.MaybePaid,
			rec.Attempts, told, tr)
		if tr.payouts > 1 {
			w.fatalf(t, "paid twice: %s", where)
		}
		if tr.paid() && (rec.Status == withdrawal.Failed || rec.Status == withdrawal.Cancelled) {
			w.fatalf(t, "paid at the provider, %s in the ledger: %s", rec.Status, where)
		}
		if (rec.Status == withdrawal.Paid || rec.Status == withdrawal.Returned) && !tr.paid() {
			w.fatalf(t, "paid in the ledger, not at the provider: %s", where)
		}
		if rec.Status == withdrawal.Returned && tr.status != "returned" {
			w.fatalf(t, "returned in the ledger, not at the provider: %s", where)
		}
		if w.cancelled[id] && tr.received && tr.status != "refused" {
			w.fatalf(t, "cancelled with the provider holding its request: %s", where)
		}
		if tr.received && tr.status != "refused" && !rec.Status.Final() && rec.Cancellable() {
			w.fatalf(t, "the provider holds the request, the user may still cancel it: %s", where)
		}
		for _, st := range told {
			if st == withdrawal.Failed && tr.paid() {
				w.fatalf(t, "finance told failed for a payout the provider made: %s", where)
			}
			if (st == withdrawal.Paid || st == withdrawal.Returned) && !tr.paid() {
				w.fatalf(t, "finance told %s for a payout the provider did not make: %s", st, where)
			}
		}
		state = append(state, fmt.Sprintf("%s/%v/%d/%s|%s/%v", rec.Status, rec.MaybePaid, min(rec.Attempts, maxAttempts+1),
			rec.Told, tr.status, tr.received))
	}
	w.stats.seen(strings.Join(state, ";"), "")
}

func (f *finance) toldOf(id string) []withdrawal.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]withdrawal.Status(nil), f.told[id]...)
}

// settle lets the world run without faults until nothing is left to do,
// then checks that the ledger caught up with the provider: every
// withdrawal ended as the money did, and finance heard of it.
func (w *world) settle(t *rapid.T) {
	w.lose.Disarm()
	w.dying, w.fin.down = lives, 0
	w.dead.Store(false)
	for _, id := range w.prov.pending() {
		w.prov.settle(id, true)
	}
	for _, write := range w.held { // the stalled consumers come back
		if err := write(); err != nil && !errors.Is(err, withdrawal.ErrStale) {
			w.fatalf(t, "a stalled consumer's late write: %v", err)
		}
	}
	w.held = nil
	for _, ev := range w.prov.allEvents() {
		w.send(t, ev)
	}
	ctx := context.Background()
	for round := 0; ; round++ {
		if round == 40 {
			w.fatalf(t, "the world did not settle: %s", w.summary())
		}
		w.clk.Advance(retryCap + attemptTimeout + time.Minute)
		if _, err := w.led.(reconciler).Reconcile(ctx, w.now()); err != nil {
			w.fatalf(t, "reconcile: %v", err)
		}
		w.poll(false)
		for len(w.sqs) > 0 {
			job := w.sqs[0]
			w.sqs = w.sqs[1:]
			if err := w.proc.ProcessClaimed(ctx, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, time.UnixMilli(job.Due).UTC()); err != nil {
				w.fatalf(t, "settle: process %s: %v", job.ID, err)
			}
		}
		done := true
		for _, id := range w.ids {
			rec, err := w.led.Find(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status.Final() && !rec.Untold() {
				continue
			}
			done = false
			if !w.lookupsOn && rec.MaybePaid && !rec.FirstSentAt.IsZero() && w.now().Sub(rec.FirstSentAt) > window {
				w.resolve(t, id) // only an operator can settle it now
			}
		}
		if done {
			break
		}
	}
	for _, id := range w.ids {
		rec, _ := w.led.Find(ctx, id)
		tr := w.prov.truth(id)
		told := w.fin.toldOf(id)
		where := fmt.Sprintf("%s (ledger %s; provider %+v; finance %v)", id, rec.Status, tr, told)
		want := map[string]withdrawal.Status{"paid": withdrawal.Paid, "returned": withdrawal.Returned, "refused": withdrawal.Failed}[tr.status]
		switch {
		case want != "" && rec.Status != want:
			w.fatalf(t, "settled behind the provider: %s", where)
		case want == "" && rec.Status != withdrawal.Failed && rec.Status != withdrawal.Cancelled:
			w.fatalf(t, "settled %s with nothing at the provider: %s", rec.Status, where)
		}
		if rec.Status.Reported() && (len(told) == 0 || told[len(told)-1] != rec.Status) {
			w.fatalf(t, "finance was not told the outcome: %s", where)
		}
		if rec.Status == withdrawal.Cancelled && len(told) > 0 {
			w.fatalf(t, "finance told of a cancelled withdrawal: %s", where)
		}
	}
	w.check(t)
}

func (w *world) summary() string {
	var b strings.Builder
	for _, id := range w.ids {
		rec, _ := w.led.Find(context.Background(), id)
		fmt.Fprintf(&b, "\n  %s: %s maybe=%v attempts=%d due=%s told=%s error=%q; provider %+v", id, rec.Status, rec.MaybePaid,
			rec.Attempts, rec.DueAt.Sub(t0), rec.Told, rec.LastError, w.prov.truth(id))
	}
	return b.String()
}

// run is one rapid run of the state machine.
func run(e env, stats *runStats) func(*rapid.T) {
	return func(t *rapid.T) {
		w := newWorld(t, e, stats)
		defer w.close()
		act := func(name string, f func(*rapid.T)) func(*rapid.T) {
			return func(t *rapid.T) {
				f(t)
				stats.seen("", name)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"create":     act("create", w.create),
			"cancel":     act("cancel", w.cancel),
			"reschedule": act("reschedule", w.reschedule),
			// A reschedule between the claim and its delivery: the old
			// time's message must not pay before the new time.
			"poll-reschedule-deliver": act("poll-reschedule-deliver", func(t *rapid.T) {
				w.poll(false)
				w.reschedule(t)
				w.deliver(t)
			}),
			"poll":       act("poll", func(*rapid.T) { w.poll(false) }),
			"poll-crash": act("poll-crash", func(*rapid.T) { w.poll(true) }),
			// Deliveries are where attempts, deaths and lost answers meet:
			// they get more of the steps.
			"deliver":          act("deliver", w.deliver),
			"deliver-again":    act("deliver", w.deliver),
			"poll-and-deliver": act("poll-and-deliver", func(t *rapid.T) { w.poll(false); w.deliver(t) }),
			"advance-and-deliver": act("advance-and-deliver", func(t *rapid.T) {
				w.clk.Advance(retryCap)
				w.poll(false)
				w.deliver(t)
			}),
			"deliver-stray":    act("deliver-stray", w.stray),
			"advance":          act("advance", w.advance),
			"reconcile":        act("reconcile", w.reconcile),
			"callback":         act("callback", w.callback),
			"forged-callback":  act("forged-callback", w.forgedCallback),
			"provider-settles": act("provider-settles", w.providerSettles),
			"provider-returns": act("provider-returns", w.providerReturns),
			"resume-stalled":   act("resume-stalled", w.resume),
			"finance-down": act("finance-down", func(t *rapid.T) {
				w.fin.mu.Lock()
				w.fin.down = rapid.IntRange(1, 2).Draw(t, "down")
				w.fin.mu.Unlock()
			}),
			"operator-resolves": act("operator-resolves", func(t *rapid.T) {
				id, ok := w.pick("resolve-id")
				if !ok {
					t.Skip("nothing")
				}
				w.resolve(t, id)
			}),
			"": w.check,
		})
		w.settle(t)
		stats.mu.Lock()
		stats.runs++
		stats.steps += w.steps
		stats.mu.Unlock()
	}
}

// dropTables deletes a run's tables (dynalite keeps them in memory).
func dropTables(db interface {
	DeleteTable(ctx context.Context, in *dynamodb.DeleteTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error)
}, t ledger.Tables) {
	for _, name := range []string{t.Withdrawals, t.Orders, t.Idempotency} {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	}
}
