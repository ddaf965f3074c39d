package modelcheck_test

// The stalling checker (issue 21, "The checker: a world that stalls"): the
// withdrawal lifecycle run by actors that the stall scheduler parks at every
// Redis, DynamoDB, provider and finance call, so that rapid chooses every
// interleaving, how long anyone stalls in model time, which calls fail,
// lose their answer, are sent twice, or are given up on and arrive late.
//
// Actors: two consumer containers (processors with their own state, one
// delivery at a time each), create, cancel and reschedule calls of the
// service, provider callbacks, reconciler passes. The provider is the real
// payout client's counterpart, in-process behind the stall transport: it
// refuses a signature older than 5 minutes, pays each withdrawal once, and
// its lookup may lag by a minute. Every step is followed by the invariants
// (reads that carry no actor); each run ends drained (every actor finished,
// every held call delivered, deliveries run until quiet) and judged again.
//
// Not modelled yet: the poller as an actor (it claims and acks within a
// step), SQS visibility timeouts (a message is redelivered at once when its
// delivery fails), a provider that refuses, leaves a request pending or
// returns a payout, a provider that forgets idempotency keys, operators
// (resolve), a Redis restart or data loss, more than one withdrawal per
// consumer batch, and If-Match on reschedules.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/stall"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Settings of the stalling world, in model time.
const (
	// tolerance is the provider's signature tolerance: a request signed
	// longer ago is refused.
	tolerance = 5 * time.Minute
	// lookupLag is how far the provider's lookup may lag what it received.
	lookupLag = time.Minute
)

// defaultStallRuns are the runs per backend without MODEL_RUNS.
var defaultStallRuns = map[string]int{"redis": 150, "dynamodb": 20}

// ---- the provider ----

// received is what the stalling provider knows of one withdrawal id.
type received struct {
	at       time.Time // when the first request for it arrived
	payoutID string
	payouts  int
	requests int
}

// stallProvider is the payout provider, in-process behind the stall
// transport: it refuses a request signed more than tolerance ago, pays each
// withdrawal id once (the idempotency key), and its lookup may lag by up to
// lookupLag (a 404 for a request received less than that ago).
type stallProvider struct {
	secret []byte
	clk    *clock.Fake

	mu       sync.Mutex
	got      map[string]*received
	lagging  bool // the lookup lags now
	down     bool // 503 to every payout request, nothing done
	refused  int  // requests refused for a stale signature
	events   []event
	lookups  int
	notFound int
}

// RoundTrip serves r in-process. It tells the sender's trace the request
// was written, as net/http's transport does once it left: the payout client
// reads a request that never left as one that cannot have paid.
func (p *stallProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace := httptrace.ContextClientTrace(r.Context()); trace != nil {
		if trace.WroteHeaders != nil {
			trace.WroteHeaders()
		}
		if trace.WroteRequest != nil {
			trace.WroteRequest(httptrace.WroteRequestInfo{})
		}
	}
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, r)
	return rec.Result(), nil
}

func (p *stallProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	id := strings.TrimPrefix(r.URL.Path, "/")
	signed := body
	if r.Method == http.MethodGet {
		signed = []byte(id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	if err := signature.Verify(p.secret, r.Header.Get(signature.Header), signed, now, tolerance); err != nil {
		p.refused++
		http.Error(w, "bad signature: "+err.Error(), http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodGet {
		p.lookups++
		g := p.got[id]
		if g == nil || (p.lagging && now.Sub(g.at) < lookupLag) {
			p.notFound++
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "paid", "payout_id": g.payoutID})
		return
	}
	var req struct {
		WithdrawalID string `json:"withdrawal_id"`
	}
	_ = json.Unmarshal(body, &req)
	key := r.Header.Get("Idempotency-Key")
	if key == "" || key != req.WithdrawalID {
		http.Error(w, "idempotency key is not the withdrawal id", http.StatusBadRequest)
		return
	}
	if p.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	g := p.got[key]
	if g == nil {
		g = &received{at: now, payoutID: "po_" + key, payouts: 1}
		p.got[key] = g
		p.events = append(p.events, event{ID: fmt.Sprintf("ev-%d", len(p.events)+1), Withdrawal: key, Status: "paid",
			PayoutID: g.payoutID})
	}
	g.requests++
	_ = json.NewEncoder(w).Encode(map[string]string{"payout_id": g.payoutID})
}

func (p *stallProvider) paid(id string) (received, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g, ok := p.got[id]
	if !ok {
		return received{}, false
	}
	return *g, true
}

func (p *stallProvider) allEvents() []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event(nil), p.events...)
}

// ---- the world ----

// notifier makes telling finance a point of its own (SNS in AWS): a call
// the checker may stall, fail, lose the answer of, send twice or hold.
type notifier struct{ f *finance }

func (n notifier) Notify(ctx context.Context, m withdrawal.Processed) error {
	_, err := stall.Do(ctx, "finance notify "+string(m.Status), func(ctx context.Context) (struct{}, error) {
		return struct{}{}, n.f.Notify(ctx, m)
	})
	return err
}

// stallEnv is what every run of one backend shares.
type stallEnv struct {
	name string
	rdb  *redis.Client
	// open returns a fresh run's ledger over q, and what clears it.
	open func(q *delayq.Queue) (withdrawal.Ledger, func(), error)
}

// container is one consumer container: a processor with its own state,
// handling one delivery at a time.
type container struct {
	name  string
	proc  *withdrawal.Processor
	actor *stall.Actor
	job   *delayq.Job
}

// creation is a create's idempotency key, its owner and body.
type creation struct {
	key, user, body string
}

// tb is what a world needs of its test: a *testing.T for a regression
// test, a *rapid.T for the checker's runs.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

type sworld struct {
	t     tb
	e     stallEnv
	s     *stall.Scheduler
	clk   *clock.Fake
	q     *delayq.Queue
	led   withdrawal.Ledger
	svc   *withdrawal.Service
	prov  *stallProvider
	fin   *finance
	cons  [2]*container
	close func()

	// sqs holds the messages handed to the work queue and not done with.
	sqs []delayq.Job
	// keys are the creates made; ids what each key's 200s answered.
	keys    []creation
	byKey   map[string]string
	answers [][2]string
	owner   map[string]string
	killed  map[*stall.Actor]bool
	nActor  int
	steps   int
	trace   []string
	stats   *runStats
}

func (w *sworld) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf("%4d %9s  ", w.steps, w.clk.Now().Sub(t0))+fmt.Sprintf(format, args...))
}

func (w *sworld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\ntrace:\n  %s\nstate:%s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "), w.summary())
}

// newSWorld is a fresh run on e; seed drives the consumers' jitter.
func newSWorld(rt tb, e stallEnv, stats *runStats, seed uint64) *sworld {
	ctx := context.Background()
	if err := e.rdb.FlushAll(ctx).Err(); err != nil {
		rt.Fatal(err)
	}
	clk := clock.NewFake(t0)
	w := &sworld{t: rt, e: e, clk: clk, s: stall.New(rt, stall.Deadlock(30*time.Second)), stats: stats,
		prov:  &stallProvider{secret: secret, clk: clk, got: map[string]*received{}},
		byKey: map[string]string{}, owner: map[string]string{}, killed: map[*stall.Actor]bool{}}
	w.fin = &finance{w: &world{}, told: map[string][]withdrawal.Status{}}
	q, err := delayq.New(e.rdb, delayq.Options{Name: withdrawal.QueueName, Kind: withdrawal.JobKind, Shards: 2})
	if err != nil {
		rt.Fatal(err)
	}
	w.q = q
	w.led, w.close, err = e.open(q)
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
	for i := range w.cons {
		// Real-time timeouts far above a run: the model's timeouts are
		// GiveUp and LoseReply.
		client, err := payout.New(payout.Config{URL: "http://provider.model", Secret: secret, Timeout: time.Hour,
			Clock: clk, HTTPClient: &http.Client{Transport: stall.Transport(w.prov)}})
		if err != nil {
			rt.Fatal(err)
		}
		jitter := rand.New(rand.NewPCG(seed, uint64(i)))
		var mu sync.Mutex
		proc, err := withdrawal.NewProcessor(withdrawal.ProcessorConfig{
			Ledger: w.led, Provider: client, Notifier: notifier{w.fin}, Clock: clk, Logger: quiet,
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
		w.cons[i] = &container{name: fmt.Sprintf("c%d", i+1), proc: proc}
	}
	return w
}

// ids are the withdrawals the ledger holds, by listing each user's (reads
// with no actor), sorted.
func (w *sworld) ids() []string {
	var ids []string
	for _, u := range users {
		cursor := ""
		for {
			page, err := w.svc.List(context.Background(), u, withdrawal.MaxPageSize, cursor)
			if err != nil {
				w.fatalf("list %s: %v", u, err)
			}
			for _, it := range page.Items {
				ids = append(ids, it.ID)
				w.owner[it.ID] = u
			}
			if page.Next == "" {
				break
			}
			cursor = page.Next
		}
	}
	sort.Strings(ids)
	return ids
}

// ---- actors ----

// spawn starts fn as an actor (only the checker's goroutine calls it).
func (w *sworld) spawn(kind string, fn func(ctx context.Context) error) *stall.Actor {
	w.nActor++
	name := fmt.Sprintf("%s#%d", kind, w.nActor)
	a := w.s.Go(context.Background(), name, fn)
	w.logf("start %s: %s", name, a)
	return a
}

// maybeFinish may run a just started actor to its end: many actors run
// undisturbed, the stalls come from the others.
func (w *sworld) maybeFinish(t *rapid.T, a *stall.Actor) {
	if rapid.Bool().Draw(t, "run-through") {
		w.finish(a)
	}
}

// finish runs a to its end.
func (w *sworld) finish(a *stall.Actor) {
	err := w.s.Finish(a)
	w.logf("%s ran through: %v", a.Name(), err)
	w.reap()
}

func (w *sworld) create(t *rapid.T) {
	var c creation
	if len(w.keys) > 0 && rapid.IntRange(0, 3).Draw(t, "create-again") == 0 {
		c = rapid.SampledFrom(w.keys).Draw(t, "again") // the app resends after no answer
	} else {
		delay := rapid.SampledFrom([]int{0, 0, 5, 60}).Draw(t, "delay")
		c = creation{key: fmt.Sprintf("k-%d", len(w.keys)), user: rapid.SampledFrom(users).Draw(t, "user"),
			body: fmt.Sprintf(`{"amount":"10.00","currency":"USD","destination":"acct_1","delay_seconds":%d}`, delay)}
		w.keys = append(w.keys, c)
	}
	w.maybeFinish(t, w.spawn("create", func(ctx context.Context) error {
		got, err := w.svc.Create(ctx, c.user, c.key, []byte(c.body))
		if err == nil {
			// Read by the checker once the actor ended (one runs at a time).
			w.answered(c.key, got.ID)
		}
		return err
	}))
}

// answered records a 200 of a create, on the actor's goroutine; check
// judges it (one actor runs at a time, and the scheduler's hand-offs order
// its writes before the checker's reads).
func (w *sworld) answered(key, id string) {
	w.answers = append(w.answers, [2]string{key, id})
}

func (w *sworld) pickID(t *rapid.T, label string) (string, bool) {
	ids := w.ids()
	if len(ids) == 0 {
		return "", false
	}
	return rapid.SampledFrom(ids).Draw(t, label), true
}

func (w *sworld) cancel(t *rapid.T) {
	id, ok := w.pickID(t, "cancel-id")
	if !ok {
		t.Skip("nothing to cancel")
	}
	user := w.owner[id]
	w.maybeFinish(t, w.spawn("cancel", func(ctx context.Context) error {
		_, err := w.svc.Cancel(ctx, user, id)
		return err
	}))
}

func (w *sworld) reschedule(t *rapid.T) {
	id, ok := w.pickID(t, "reschedule-id")
	if !ok {
		t.Skip("nothing to reschedule")
	}
	user := w.owner[id]
	body := rapid.SampledFrom([]string{`{"delay_seconds":0}`, `{"delay_seconds":30}`, `{"delay_seconds":300}`}).
		Draw(t, "reschedule-to")
	w.maybeFinish(t, w.spawn("reschedule", func(ctx context.Context) error {
		_, err := w.svc.Reschedule(ctx, user, id, []byte(body), "")
		return err
	}))
}

func (w *sworld) callback(t *rapid.T) {
	evs := w.prov.allEvents()
	if len(evs) == 0 {
		t.Skip("no event")
	}
	ev := rapid.SampledFrom(evs).Draw(t, "event")
	body := fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":%q,"status":%q,"reason":"model"}`,
		ev.ID, ev.Withdrawal, ev.PayoutID, ev.Status)
	w.maybeFinish(t, w.spawn("callback", func(ctx context.Context) error {
		_, err := w.svc.Callback(ctx, []byte(body))
		return err
	}))
}

func (w *sworld) reconcile(t *rapid.T) {
	r, ok := w.led.(reconciler)
	if !ok {
		t.Skip("no reconciler on this backend")
	}
	w.maybeFinish(t, w.spawn("reconciler", func(ctx context.Context) error {
		_, err := r.Reconcile(ctx, w.clk.Now())
		return err
	}))
}

// poll claims what is due and hands it to the work queue (the poller is
// not an actor: it runs within the step).
func (w *sworld) poll() {
	ctx := context.Background()
	for n := range w.q.Shards() {
		c, err := w.q.Claim(ctx, n, w.clk.Now(), lease, 100)
		if err != nil {
			w.fatalf("claim: %v", err)
		}
		if len(c.Jobs) == 0 {
			continue
		}
		w.logf("poll shard %d: %d jobs", n, len(c.Jobs))
		w.sqs = append(w.sqs, c.Jobs...)
		if _, err := w.q.AckLease(ctx, n, c.Lease); err != nil {
			w.fatalf("ack: %v", err)
		}
	}
}

// deliver hands a message to an idle container. The message stays in the
// work queue until a delivery of it succeeds (at least once: the other
// container may get it too).
func (w *sworld) deliver(t *rapid.T) {
	if len(w.sqs) == 0 {
		w.poll()
	}
	if len(w.sqs) == 0 {
		w.stats.seen("", "deliver-skipped: no message")
		t.Skip("no message")
	}
	c := w.cons[rapid.IntRange(0, len(w.cons)-1).Draw(t, "container")]
	if c.actor != nil && !c.actor.Done() {
		w.stats.seen("", "deliver-skipped: busy")
		t.Skip("container busy")
	}
	w.maybeFinish(t, w.deliverTo(c, w.sqs[rapid.IntRange(0, len(w.sqs)-1).Draw(t, "message")]))
}

// deliverTo starts c's consumer on job.
func (w *sworld) deliverTo(c *container, job delayq.Job) *stall.Actor {
	c.job = &job
	c.actor = w.spawn("consumer-"+c.name, func(ctx context.Context) error {
		return c.proc.ProcessClaimed(ctx, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, time.UnixMilli(job.Due).UTC())
	})
	w.reap()
	return c.actor
}

// reap takes the messages whose delivery succeeded off the work queue.
func (w *sworld) reap() {
	for _, c := range w.cons {
		if c.actor == nil || !c.actor.Done() || c.job == nil {
			continue
		}
		if c.actor.Err() == nil && !w.killed[c.actor] {
			if i := slices.IndexFunc(w.sqs, func(j delayq.Job) bool { return j == *c.job }); i >= 0 {
				w.sqs = slices.Delete(w.sqs, i, i+1)
			}
		}
		w.logf("%s ended: %v", c.actor.Name(), c.actor.Err())
		c.job = nil
	}
}

// act decides the fate of a parked actor's call.
func (w *sworld) act(t *rapid.T) {
	parked := w.s.Parked()
	if len(parked) == 0 {
		t.Skip("nobody parked")
	}
	a := parked[rapid.IntRange(0, len(parked)-1).Draw(t, "actor")]
	at := a.At()
	v := rapid.IntRange(0, 13).Draw(t, "verdict")
	switch {
	case v >= 12:
		err := w.s.Finish(a)
		w.logf("run %s from %s to its end: %v", a.Name(), at, err)
	case v <= 5:
		w.s.Step(a)
		w.logf("step %s at %s -> %s", a.Name(), at, a)
	case v == 6:
		w.s.Fail(a)
		w.logf("fail %s at %s -> %s", a.Name(), at, a)
	case v == 7:
		w.s.LoseReply(a)
		w.logf("lose the reply of %s at %s -> %s", a.Name(), at, a)
	case v == 8:
		w.s.Resend(a)
		w.logf("resend %s at %s -> %s", a.Name(), at, a)
	case v == 9 || v == 10:
		// A give-up is a timeout: the caller's clock moved on meanwhile.
		l := w.s.GiveUp(a)
		w.logf("give up on %s at %s (late %d) -> %s", a.Name(), at, l.ID, a)
	case v == 11:
		w.kill(a)
	}
	w.stats.seen("", "act")
	w.reap()
}

// kill stops a where it is, as a process that died: every call it makes
// from now on fails, nothing more of it reaches a store.
func (w *sworld) kill(a *stall.Actor) {
	w.killed[a] = true
	at := a.At()
	for n := 0; !a.Done(); n++ {
		if n == 1000 {
			w.fatalf("%s does not end when its calls fail", a.Name())
		}
		w.s.Fail(a)
	}
	w.logf("kill %s at %s", a.Name(), at)
}

func (w *sworld) deliverLate(t *rapid.T) {
	ls := w.s.Lates()
	if len(ls) == 0 {
		t.Skip("nothing held")
	}
	l := ls[rapid.IntRange(0, len(ls)-1).Draw(t, "late")]
	got := w.s.DeliverLate(l.ID)
	w.logf("deliver late %d (%s at %s): delivered %v, err %v", l.ID, l.Actor, l.Label, got.Delivered, got.Err)
}

func (w *sworld) advance(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, attemptTimeout + time.Second,
		2 * time.Minute, tolerance + time.Second, 7 * time.Minute}).Draw(t, "advance")
	w.clk.Advance(d)
	w.logf("advance %s", d)
}

// ---- invariants ----

// check holds after every step; its reads carry no actor.
func (w *sworld) check(*rapid.T) { w.verify() }

// verify checks the invariants that hold after every step.
func (w *sworld) verify() {
	w.steps++
	ids := w.ids()
	perUser := map[string]int{}
	for _, id := range ids {
		perUser[w.owner[id]]++
		rec, err := w.led.Find(context.Background(), id)
		if err != nil {
			w.fatalf("find %s: %v", id, err)
		}
		g, paid := w.prov.paid(id)
		where := fmt.Sprintf("%s (ledger %s maybe=%v attempts=%d; provider %+v)", id, rec.Status, rec.MaybePaid, rec.Attempts, g)
		if paid && (rec.Status == withdrawal.Cancelled || rec.Status == withdrawal.Failed) {
			w.fatalf("paid at the provider, %s in the ledger: %s", rec.Status, where)
		}
		if g.payouts > 1 {
			w.fatalf("paid twice: %s", where)
		}
		if rec.Status == withdrawal.Paid && !paid {
			w.fatalf("paid in the ledger, not at the provider: %s", where)
		}
		for _, st := range w.fin.toldOf(id) {
			if st == withdrawal.Failed && paid {
				w.fatalf("finance told failed for a payout the provider made: %s", where)
			}
		}
	}
	for _, a := range w.answers {
		if prev, ok := w.byKey[a[0]]; ok && prev != a[1] {
			w.fatalf("idempotency key %s answered two withdrawals: %s and %s", a[0], prev, a[1])
		}
		w.byKey[a[0]] = a[1]
	}
	w.answers = nil
	// One withdrawal per idempotency key: a user has no more withdrawals
	// than keys, and every key answered names a stored one.
	keys := map[string]int{}
	for _, c := range w.keys {
		keys[c.user]++
	}
	for u, n := range perUser {
		if n > keys[u] {
			w.fatalf("%s has %d withdrawals from %d idempotency keys", u, n, keys[u])
		}
	}
	for k, id := range w.byKey {
		if !slices.Contains(ids, id) {
			w.fatalf("idempotency key %s answered %s, which the ledger does not hold", k, id)
		}
	}
	w.stats.seen(w.state(ids), "")
}

// state is the run's abstract state: each withdrawal's status, whether it
// may have been paid and whether the provider has it, and where the actors
// are parked.
func (w *sworld) state(ids []string) string {
	var b strings.Builder
	for _, id := range ids {
		rec, _ := w.led.Find(context.Background(), id)
		_, paid := w.prov.paid(id)
		fmt.Fprintf(&b, "%s/%v/%d/%s|%v;", rec.Status, rec.MaybePaid, min(rec.Attempts, maxAttempts+1), rec.Told, paid)
	}
	for _, a := range w.s.Parked() {
		b.WriteString(strings.SplitN(a.Name(), "#", 2)[0] + "@" + a.At() + ";")
	}
	return b.String()
}

// drain finishes every actor, delivers what was held, and lets the world
// run without stalls until quiet; then the ledger must agree with the
// provider and finance must have been told exactly the final statuses.
func (w *sworld) drain() {
	w.s.FinishAll()
	w.reap()
	for _, l := range w.s.Lates() {
		w.s.DeliverLate(l.ID)
	}
	w.prov.mu.Lock()
	w.prov.down, w.prov.lagging = false, false
	w.prov.mu.Unlock()
	ctx := context.Background()
	for _, ev := range w.prov.allEvents() {
		body := fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":%q,"status":%q,"reason":"model"}`,
			ev.ID, ev.Withdrawal, ev.PayoutID, ev.Status)
		if _, err := w.svc.Callback(ctx, []byte(body)); err != nil && !errors.Is(err, withdrawal.ErrNotFound) {
			w.fatalf("drain: callback %s: %v", ev.ID, err)
		}
	}
	w.verify()
	for round := 0; ; round++ {
		if round == 40 {
			w.fatalf("the world did not settle")
		}
		w.clk.Advance(retryCap + tolerance + 2*time.Minute)
		if r, ok := w.led.(reconciler); ok {
			if _, err := r.Reconcile(ctx, w.clk.Now()); err != nil {
				w.fatalf("drain: reconcile: %v", err)
			}
		}
		w.poll()
		for len(w.sqs) > 0 {
			job := w.sqs[0]
			w.sqs = w.sqs[1:]
			if err := w.cons[0].proc.ProcessClaimed(ctx, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, time.UnixMilli(job.Due).UTC()); err != nil {
				w.fatalf("drain: process %s: %v", job.ID, err)
			}
		}
		done := true
		for _, id := range w.ids() {
			rec, err := w.led.Find(ctx, id)
			if err != nil {
				w.fatalf("find %s: %v", id, err)
			}
			if !rec.Status.Final() || rec.Untold() {
				done = false
			}
		}
		if done {
			break
		}
	}
	for _, id := range w.ids() {
		rec, _ := w.led.Find(ctx, id)
		g, paid := w.prov.paid(id)
		told := w.fin.toldOf(id)
		where := fmt.Sprintf("%s (ledger %s; provider %+v; finance %v)", id, rec.Status, g, told)
		switch {
		case paid && rec.Status != withdrawal.Paid && rec.Status != withdrawal.Returned:
			w.fatalf("paid at the provider, %s in the ledger once drained: %s", rec.Status, where)
		case !paid && rec.Status != withdrawal.Failed && rec.Status != withdrawal.Cancelled:
			w.fatalf("%s with nothing paid at the provider once drained: %s", rec.Status, where)
		}
		for _, st := range told {
			if st != rec.Status {
				w.fatalf("finance was told %s, the withdrawal ended %s: %s", st, rec.Status, where)
			}
		}
		if rec.Status.Reported() && len(told) == 0 {
			w.fatalf("finance was not told the outcome: %s", where)
		}
	}
	w.verify()
}

func (w *sworld) summary() string {
	var b strings.Builder
	for _, id := range w.ids() {
		rec, _ := w.led.Find(context.Background(), id)
		g, _ := w.prov.paid(id)
		fmt.Fprintf(&b, "\n  %s: %s maybe=%v attempts=%d due=%s told=%s error=%q; provider %+v; finance %v", id, rec.Status,
			rec.MaybePaid, rec.Attempts, rec.DueAt.Sub(t0), rec.Told, rec.LastError, g, w.fin.toldOf(id))
	}
	for _, a := range w.s.Actors() {
		fmt.Fprintf(&b, "\n  actor %s: %v", a, a.Err())
	}
	return b.String()
}

// ---- the test ----

func stallRun(e stallEnv, stats *runStats) func(*rapid.T) {
	return func(t *rapid.T) {
		w := newSWorld(t, e, stats, rapid.Uint64().Draw(t, "seed"))
		defer w.close()
		defer w.s.Abort()
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
			"callback":   act("callback", w.callback),
			"reconcile":  act("reconcile", w.reconcile),
			"poll":       act("poll", func(*rapid.T) { w.poll() }),
			"deliver":    act("deliver", w.deliver),
			"poll-and-deliver": act("poll-and-deliver", func(t *rapid.T) {
				w.poll()
				w.deliver(t)
			}),
			"advance-poll-deliver": act("advance-poll-deliver", func(t *rapid.T) {
				w.clk.Advance(retryBase)
				w.logf("advance %s", retryBase)
				w.poll()
				w.deliver(t)
			}),
			// Actors' calls are where stalls happen: they get most steps.
			"act":          w.act,
			"act-again":    w.act,
			"act-more":     w.act,
			"deliver-late": act("deliver-late", w.deliverLate),
			"advance":      act("advance", w.advance),
			"provider-lags": act("provider-lags", func(t *rapid.T) {
				w.prov.mu.Lock()
				w.prov.lagging = rapid.Bool().Draw(t, "lagging")
				w.prov.mu.Unlock()
			}),
			"provider-down": act("provider-down", func(t *rapid.T) {
				w.prov.mu.Lock()
				w.prov.down = rapid.IntRange(0, 3).Draw(t, "down") == 0
				w.prov.mu.Unlock()
			}),
			"": w.check,
		})
		w.drain()
		stats.mu.Lock()
		stats.runs++
		stats.steps += w.steps
		stats.mu.Unlock()
	}
}

func TestModelStall(t *testing.T) {
	for _, name := range []string{"redis", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			n := stallRuns(t, name)
			e := openStallEnv(t, name)
			stats := &runStats{states: map[string]bool{}, acts: map[string]int{}}
			start := time.Now()
			rapid.Check(t, stallRun(e, stats))
			report(t, "stall/"+name, n, stats, time.Since(start))
		})
	}
}

// openStallEnv starts the stores of a backend, with the stall hooks on
// their clients.
func openStallEnv(t *testing.T, name string) stallEnv {
	srv := redistest.Start(t)
	// Above the number of actors: a parked actor in a WATCH holds a
	// connection.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	rdb.AddHook(stall.RedisHook{})
	t.Cleanup(func() { _ = rdb.Close() })
	e := stallEnv{name: name, rdb: rdb}
	if name == "redis" {
		e.open = func(q *delayq.Queue) (withdrawal.Ledger, func(), error) {
			l := ledger.NewRedis(rdb, q)
			l.Grace = time.Minute
			return l, func() {}, nil
		}
		return e
	}
	client := dynalitetest.Start(t).Client()
	e.open = func(q *delayq.Queue) (withdrawal.Ledger, func(), error) {
		k := tableSeq.Add(1)
		tables := ledger.Tables{Withdrawals: fmt.Sprintf("sw-%d", k), Orders: fmt.Sprintf("so-%d", k),
			Idempotency: fmt.Sprintf("si-%d", k)}
		if err := ledger.CreateTables(context.Background(), client, tables); err != nil {
			return nil, nil, err
		}
		l := ledger.NewDynamo(stall.Dynamo(client), tables, q, ledger.DynamoOptions{Logger: quiet, Grace: time.Minute})
		return l, func() { dropTables(client, tables) }, nil
	}
	return e
}

// stallRuns is runs for the stalling checker: its own default, MODEL_RUNS
// when set.
func stallRuns(t *testing.T, name string) int {
	saved := defaultRuns[name]
	defaultRuns[name] = defaultStallRuns[name]
	defer func() { defaultRuns[name] = saved }()
	return runs(t, name)
}
