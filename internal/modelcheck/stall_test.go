package modelcheck_test

// The stalling checker (issue 21, "The checker: a world that stalls"): the
// withdrawal lifecycle run by actors that the stall scheduler parks at every
// Redis, DynamoDB, provider and finance call, so that rapid chooses every
// interleaving, how long anyone stalls in model time, which calls fail,
// lose their answer, are sent twice, or are given up on and arrive late.
//
// Actors: two consumer containers (processors with their own state, one
// delivery at a time each), the real poller (one round: claim, send to the
// work queue, ack; it may stall between its claim and its ack past the
// lease, and its send may fail, be lost or land late), create, cancel and
// reschedule calls of the service (reschedules with no If-Match, with the
// ETag read as the call starts, which goes stale while it stalls, or an
// older one), provider callbacks (any event, again, late, out of order, and
// forged ones about withdrawals never sent), operators (hourglass payouts
// resolve: they read the unresolved list, the record and the provider's own
// records, may stall, then resolve by what they read, naming the revision
// they judged), and reconciler passes. The work queue is SQS as Lambda uses
// it: a message received is invisible for the visibility timeout (model
// time) and delivered again after it unless its latest delivery succeeded,
// so a second delivery may run while the first is stalled.
//
// The provider is the real payout client's counterpart, in-process behind
// the stall transport: it refuses a signature older than 5 minutes, acts on
// each withdrawal id once while it remembers the key and forgets it after
// the idempotency window (a request then is a new one: it pays again),
// takes a new request as told (pays, refuses for good with a 422, or leaves
// it pending with a 409 until it settles it, paid or refused), may have a
// paid payout come back (returned), may be down (503, to payout requests
// and to lookups apart), and its lookup may lag by a minute. Each outcome
// is a callback event.
//
// Every step is followed by the invariants (reads that carry no actor):
// nothing paid or pending at the provider is failed or cancelled; no
// second payout; nothing paid or returned in the ledger that the provider
// did not pay or get back; a request the provider holds cannot be
// cancelled; finance never told an outcome the provider contradicts; no
// operator resolution of a withdrawal never sent; one withdrawal per
// idempotency key; a refused reschedule, resolution or forged callback
// changes nothing; a reschedule with If-Match is a write on the revision
// named; a provider's event is never refused as never sent. Each run ends
// drained (every actor finished, every held call delivered, pending
// payouts settled, every event called back, deliveries run until quiet):
// then every withdrawal ends as the provider's records say and finance was
// told its outcome, and only statuses it held.
//
// Not modelled yet: a Redis restart or data loss, more than one withdrawal
// per consumer batch, a provider without a lookup, rotated secrets (401
// then a new key), and finance down (its calls fail only as the checker
// fails them).

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
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/ledger"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/poller"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Settings of the stalling world, in model time.
const (
	// tolerance is the provider's signature tolerance: a request signed
	// longer ago is refused.
	tolerance = 5 * time.Minute
	// stallWindow is the provider's idempotency window, and ours: short, so
	// that runs reach it (it must exceed an attempt plus the time after
	// which a lookup's 404 proves anything).
	stallWindow = 15 * time.Minute
	// visibility is the work queue's visibility timeout: a message
	// received is delivered again after it unless a delivery deleted it.
	visibility = time.Minute
	// lookupLag is how far the provider's lookup may lag what it received.
	lookupLag = time.Minute
)

// defaultStallRuns are the runs per backend without MODEL_RUNS.
var defaultStallRuns = map[string]int{"redis": 150, "dynamodb": 20}

// ---- the provider ----

// received is what the stalling provider knows of one withdrawal id.
type received struct {
	// at is when the request it acts on arrived: the key's first, or the
	// first after it forgot the key (window).
	at time.Time
	// status is pending, paid, refused or returned.
	status   string
	payoutID string
	// payouts counts the payouts made: more than one is money paid twice.
	payouts  int
	requests int
}

// paid reports whether the provider paid it (and perhaps got it back).
func (g received) paid() bool { return g.status == "paid" || g.status == "returned" }

// answer is how the stalling provider takes a request it does not know
// (a new key, or one it forgot).
type answer int

const (
	answerPay     answer = iota // pays, 200
	answerRefuse                // refuses the payout for good, 422
	answerPending               // takes it and settles it later, 409 meanwhile
)

var answerNames = [...]string{"pay", "refuse", "pending"}

func (a answer) String() string { return answerNames[a] }

// stallProvider is the payout provider, in-process behind the stall
// transport: it refuses a request signed more than tolerance ago, acts on
// each withdrawal id once while it remembers the key (window; after that a
// request is a new one, which may pay again), pays, refuses for good or
// leaves the request pending as told, and its lookup may lag by up to
// lookupLag (a 404 for a request received less than that ago). It may be
// down (503 to every request and lookup), settle a pending payout, and
// have a paid one come back (returned); each outcome is a callback event.
// Its payout requests and its lookups may be down (503) apart.
type stallProvider struct {
	secret []byte
	clk    *clock.Fake

	mu       sync.Mutex
	got      map[string]*received
	answer   answer // how a request it does not know is taken
	lagging  bool   // the lookup lags now
	down     bool   // 503 to every payout request, nothing done
	lookDown bool   // 503 to every lookup
	refused  int    // requests refused for a stale signature
	events   []event
	lookups  int
	notFound int
	// forgotten counts requests for a key it forgot.
	forgotten int
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
		if p.lookDown {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		p.lookup(w, id, now)
		return
	}
	if p.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
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
	g := p.got[key]
	if g == nil {
		g = &received{}
		p.got[key] = g
	}
	g.requests++
	if g.status != "" && now.Sub(g.at) <= stallWindow {
		// A key it remembers: the first answer again.
		p.reply(w, g)
		return
	}
	// A new request, or one whose key it forgot: it acts on it.
	if g.status != "" {
		p.forgotten++
	}
	g.at = now
	switch p.answer {
	case answerRefuse:
		if g.status == "" || g.status == "refused" {
			g.status = "refused"
			p.emit(key, g, "failed")
		}
		http.Error(w, `{"error":"refused"}`, http.StatusUnprocessableEntity)
		return
	case answerPending:
		if g.paid() {
			g.payouts++ // a forgotten key: it pays again, later
		} else {
			g.status = "pending"
		}
		http.Error(w, `{"error":"in progress"}`, http.StatusConflict)
		return
	}
	g.payouts++
	if !g.paid() {
		g.status, g.payoutID = "paid", "po_"+key
		p.emit(key, g, "paid")
	}
	p.reply(w, g)
}

// reply answers a payout request for a key it knows as it stands.
func (p *stallProvider) reply(w http.ResponseWriter, g *received) {
	switch g.status {
	case "pending":
		http.Error(w, `{"error":"in progress"}`, http.StatusConflict)
	case "refused":
		http.Error(w, `{"error":"refused"}`, http.StatusUnprocessableEntity)
	default:
		_ = json.NewEncoder(w).Encode(map[string]string{"payout_id": g.payoutID})
	}
}

// lookup answers GET /{id}: the truth, unless it lags.
func (p *stallProvider) lookup(w http.ResponseWriter, id string, now time.Time) {
	p.lookups++
	g := p.got[id]
	if g == nil || g.status == "" || (p.lagging && now.Sub(g.at) < lookupLag) {
		p.notFound++
		w.WriteHeader(http.StatusNotFound)
		return
	}
	switch {
	case g.paid():
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "paid", "payout_id": g.payoutID})
	case g.status == "refused":
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "failed", "reason": "refused"})
	default:
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "pending"})
	}
}

// emit adds a callback event about id (the provider sends it, may send it
// again, or late).
func (p *stallProvider) emit(id string, g *received, status string) {
	p.events = append(p.events, event{ID: fmt.Sprintf("ev-%d", len(p.events)+1), Withdrawal: id, Status: status,
		PayoutID: g.payoutID})
}

// settle ends a pending payout: paid or refused.
func (p *stallProvider) settle(id string, pay bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.got[id]
	if g == nil || g.status != "pending" {
		return
	}
	if pay {
		g.status, g.payoutID = "paid", "po_"+id
		g.payouts++
		p.emit(id, g, "paid")
		return
	}
	g.status = "refused"
	p.emit(id, g, "failed")
}

// giveBack makes a paid payout come back (a closed account, say).
func (p *stallProvider) giveBack(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.got[id]; g != nil && g.status == "paid" {
		g.status = "returned"
		p.emit(id, g, "returned")
	}
}

// with are the ids whose status is status, sorted.
func (p *stallProvider) with(status string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for id, g := range p.got {
		if g.status == status {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// truth is what the provider knows of id (zero: never received).
func (p *stallProvider) truth(id string) received {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g, ok := p.got[id]; ok {
		return *g
	}
	return received{}
}

// paid is the truth of id and whether the provider paid it.
func (p *stallProvider) paid(id string) (received, bool) {
	g := p.truth(id)
	return g, g.paid()
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
	msg   *message
	// receipt is the receipt of the delivery it handles: only the latest
	// receipt of a message deletes it, as in SQS.
	receipt int
}

// message is one message of the work queue (SQS): invisible until
// visibleAt once received, deleted by a delivery that succeeded.
type message struct {
	n         int
	job       delayq.Job
	visibleAt time.Time
	receipt   int
}

// workQueue is the model's SQS as the poller's dispatcher: a send is a
// point of its own, which the checker may stall, fail, lose the answer
// of, send twice or hold (a batch that lands after the poller gave up).
type workQueue struct{ w *sworld }

func (d workQueue) Dispatch(ctx context.Context, jobs []delayq.Job) ([]delayq.Job, error) {
	_, err := stall.Do(ctx, "sqs SendMessageBatch", func(context.Context) (struct{}, error) {
		d.w.enqueue(jobs)
		return struct{}{}, nil
	})
	if err != nil {
		return jobs, err
	}
	return nil, nil
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
	pl    *poller.Poller
	close func()

	// sqs holds the messages handed to the work queue and not deleted.
	sqs  []*message
	nMsg int
	// violations are broken invariants that actors saw in their own
	// steps (a refusal that changed something); verify reports them.
	violations []string
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
			IdempotencyWindow: stallWindow,
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
	// The real poller, one shard at a time (an actor makes its calls one
	// after another), acking what the work queue took.
	w.pl, err = poller.New(poller.Config{Queues: poller.Static(q), Dispatcher: workQueue{w}, Clock: clk, Logger: quiet,
		Batch: 10, Lease: lease, Ack: true, Concurrency: 1, RetryDelay: time.Second})
	if err != nil {
		rt.Fatal(err)
	}
	return w
}

// enqueue puts jobs on the work queue, visible at once.
func (w *sworld) enqueue(jobs []delayq.Job) {
	for _, j := range jobs {
		w.nMsg++
		w.sqs = append(w.sqs, &message{n: w.nMsg, job: j, visibleAt: w.clk.Now()})
	}
}

// violate records a broken invariant an actor saw (on its goroutine: one
// actor runs at a time, and verify reads it after the step).
func (w *sworld) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
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
		got, err := httpapi.CreateWithdrawal(ctx, w.svc, c.user, c.key, []byte(c.body))
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

// reschedule moves a withdrawal as its owner, with no If-Match, the ETag
// the checker read as the call starts (stale once the record moved while
// the call stalled) or an older one. A 200 with If-Match must be a write
// on the very revision named; a 412 changes nothing.
func (w *sworld) reschedule(t *rapid.T) {
	id, ok := w.pickID(t, "reschedule-id")
	if !ok {
		t.Skip("nothing to reschedule")
	}
	user := w.owner[id]
	body := rapid.SampledFrom([]string{`{"delay_seconds":0}`, `{"delay_seconds":30}`, `{"delay_seconds":300}`}).
		Draw(t, "reschedule-to")
	cur, err := w.led.Find(context.Background(), id)
	if err != nil {
		w.fatalf("find %s: %v", id, err)
	}
	ifMatch, rev := "", int64(-1)
	switch rapid.SampledFrom([]string{"", "", "read", "older"}).Draw(t, "if-match") {
	case "read":
		ifMatch, rev = cur.ETag(), cur.Revision
	case "older":
		ifMatch, rev = withdrawal.ETagOf(id, cur.Revision-1), cur.Revision-1
	}
	w.maybeFinish(t, w.spawn("reschedule", func(ctx context.Context) error {
		got, err := httpapi.RescheduleWithdrawal(ctx, w.svc, user, id, []byte(body), ifMatch)
		switch {
		case err == nil && ifMatch != "":
			w.stats.seen("", "reschedule: if-match admitted")
		case errors.Is(err, withdrawal.ErrPreconditionFailed):
			w.stats.seen("", "reschedule: 412")
		}
		switch {
		case err == nil && ifMatch != "" && got.Revision != rev+1:
			w.violate("a reschedule of %s with If-Match revision %d was admitted as revision %d", id, rev, got.Revision)
		case errors.Is(err, withdrawal.ErrPreconditionFailed), errors.Is(err, withdrawal.ErrNotReschedulable):
			w.unchanged("reschedule", id, got, err)
		}
		return err
	}))
}

// unchanged checks, on a refusing actor's goroutine right after the
// refusal (no other actor ran since its last point), that the record is
// still the one the refusal was decided on.
func (w *sworld) unchanged(what, id string, decided withdrawal.Withdrawal, why error) {
	after, err := w.led.Find(context.Background(), id)
	if err != nil || after.Revision != decided.Revision || after.Op != decided.Op || after.Status != decided.Status {
		w.violate("a refused %s (%v) changed %s: revision %d op %s %s -> revision %d op %s %s (%v)", what, why, id,
			decided.Revision, decided.Op, decided.Status, after.Revision, after.Op, after.Status, err)
	}
}

// callback is the provider's callback of one of its events: any of them,
// again, late or out of order. An event of the provider's is about a
// request it received, so it is never refused as never sent.
func (w *sworld) callback(t *rapid.T) {
	evs := w.prov.allEvents()
	if len(evs) == 0 {
		t.Skip("no event")
	}
	ev := rapid.SampledFrom(evs).Draw(t, "event")
	body := fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":%q,"status":%q,"reason":"model"}`,
		ev.ID, ev.Withdrawal, ev.PayoutID, ev.Status)
	w.maybeFinish(t, w.spawn("callback", func(ctx context.Context) error {
		got, err := httpapi.ApplyCallback(ctx, w.svc, []byte(body))
		if errors.Is(err, withdrawal.ErrNotSent) {
			w.violate("the provider's callback %s %s about %s was refused as never sent: %+v", ev.ID, ev.Status, ev.Withdrawal,
				got.Withdrawal)
		}
		return err
	}))
}

// forgedCallback is a signed callback about a withdrawal never sent to the
// provider (its bug, a misrouted event), within the step: it must be
// refused and change nothing. (A forged callback about a withdrawal sent is
// taken as the provider's word; a stall between the two would make it
// one.)
func (w *sworld) forgedCallback(t *rapid.T) {
	var never []string
	for _, id := range w.ids() {
		if rec, err := w.led.Find(context.Background(), id); err == nil && rec.NeverSent() {
			never = append(never, id)
		}
	}
	if len(never) == 0 {
		t.Skip("every withdrawal was sent")
	}
	id := rapid.SampledFrom(never).Draw(t, "never-sent")
	st := rapid.SampledFrom([]string{"paid", "failed", "returned"}).Draw(t, "forged-status")
	body := fmt.Sprintf(`{"event_id":"forged-%s-%s","withdrawal_id":%q,"payout_id":"po_forged","status":%q,"reason":"model"}`,
		id, st, id, st)
	got, err := httpapi.ApplyCallback(context.Background(), w.svc, []byte(body))
	w.logf("forged callback %s about %s: %v", st, id, err)
	if !errors.Is(err, withdrawal.ErrNotSent) {
		w.fatalf("a forged callback about %s, never sent, was not refused as never sent: %v", id, err)
	}
	w.unchanged("forged callback", id, got.Withdrawal, err)
}

// resolve is an operator (hourglass payouts resolve): it reads the
// unresolved list and the withdrawal, looks the payout up on the
// provider's own records (its dashboard) and settles it by what they say,
// when they say something for good: paid, refused, or nothing received
// long enough after the last send that nothing can still arrive, naming
// the revision it judged. It may stall between its read and its write and
// then act on what it read. A careless operator resolves what the list
// does not name too; either way a refused resolution changes nothing.
func (w *sworld) resolve(t *rapid.T) {
	id, ok := w.pickID(t, "resolve-id")
	if !ok {
		t.Skip("nothing to resolve")
	}
	careless := rapid.IntRange(0, 2).Draw(t, "careless") == 0
	// Resolutions name the revision judged: without it a stale one is
	// taken (TestStallStaleResolutionWithoutRevision).
	w.maybeFinish(t, w.spawn("resolve", func(ctx context.Context) error { return w.operate(ctx, id, careless, true, nil) }))
}

// operate is the operator's work on withdrawal id; decided, if set, hears
// of the resolution once it is decided, before it is sent. judged says
// whether the resolution names the revision the operator judged
// (Resolution.IfRevision), so that it is refused if the record moved.
func (w *sworld) operate(ctx context.Context, id string, careless, judged bool, decided func(withdrawal.Resolution)) error {
	list, err := w.svc.Unresolved(ctx, maxAttempts)
	if err != nil {
		return err
	}
	listed := slices.ContainsFunc(list, func(x withdrawal.Withdrawal) bool { return x.ID == id })
	if !listed && !careless {
		w.stats.seen("", "resolve: not listed")
		return nil
	}
	rec, err := w.led.Find(ctx, id)
	if err != nil {
		return err
	}
	r, ok := operatorVerdict(rec, w.prov.truth(id), w.clk.Now())
	if !ok {
		w.stats.seen("", "resolve: nothing for good")
		return nil
	}
	if judged {
		r.IfRevision = &rec.Revision
	}
	if decided != nil {
		decided(r)
	}
	got, err := w.svc.Resolve(ctx, id, r)
	switch {
	case errors.Is(err, withdrawal.ErrNotResolvable):
		w.stats.seen("", "resolve: refused")
		w.unchanged("resolution", id, got, err)
	case errors.Is(err, withdrawal.ErrPreconditionFailed):
		w.stats.seen("", "resolve: refused, the record moved")
		w.unchanged("resolution", id, got, err)
	case err == nil:
		w.stats.seen("", fmt.Sprintf("resolve: %s (listed %v)", r.Status, listed))
	}
	return err
}

// operatorVerdict is what an operator resolves rec as, from the provider's
// records g read at now; false when they say nothing for good.
func operatorVerdict(rec withdrawal.Withdrawal, g received, now time.Time) (withdrawal.Resolution, bool) {
	r := withdrawal.Resolution{By: "model-operator", MaxAttempts: maxAttempts}
	switch {
	case g.paid():
		r.Status, r.PayoutID = withdrawal.Paid, g.payoutID
	case g.status == "refused":
		r.Status, r.Reason = withdrawal.Failed, "refused at the provider"
	case g.status == "" && now.After(rec.SentBy(attemptTimeout).Add(withdrawal.DefaultNeverReceivedAfter)):
		r.Status, r.Reason = withdrawal.Failed, "not at the provider"
	default:
		return r, false
	}
	return r, true
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

// poll is one round of the real poller within the step: it claims what is
// due (and what an expired lease gave back), hands it to the work queue
// and acks it.
func (w *sworld) poll() {
	before := w.nMsg
	res, err := w.pl.Round(context.Background())
	if err != nil {
		w.fatalf("poll: %v", err)
	}
	if res.Claimed > 0 || res.Reaped > 0 {
		w.logf("poll: %d claimed, %d reaped, messages %d..%d", res.Claimed, res.Reaped, before+1, w.nMsg)
	}
}

// pollActor is one round of the poller as an actor: it may stall between
// its claim and its ack (past the lease: the jobs come back and are sent
// again), and its send may fail, be lost or land late.
func (w *sworld) pollActor(t *rapid.T) {
	w.maybeFinish(t, w.spawn("poller", func(ctx context.Context) error {
		_, err := w.pl.Round(ctx)
		return err
	}))
}

// visible are the messages a receive may return now.
func (w *sworld) visible() []*message {
	var out []*message
	for _, m := range w.sqs {
		if !m.visibleAt.After(w.clk.Now()) {
			out = append(out, m)
		}
	}
	return out
}

// deliver hands a visible message to an idle container; it is invisible
// for the visibility timeout, then delivered again unless a delivery of
// it succeeded (the other container may get it while the first still
// runs).
func (w *sworld) deliver(t *rapid.T) {
	if len(w.visible()) == 0 {
		w.poll()
	}
	vis := w.visible()
	if len(vis) == 0 {
		w.stats.seen("", "deliver-skipped: no message")
		t.Skip("no message")
	}
	c := w.cons[rapid.IntRange(0, len(w.cons)-1).Draw(t, "container")]
	if c.actor != nil && !c.actor.Done() {
		w.stats.seen("", "deliver-skipped: busy")
		t.Skip("container busy")
	}
	w.maybeFinish(t, w.deliverTo(c, vis[rapid.IntRange(0, len(vis)-1).Draw(t, "message")]))
}

// deliverTo starts c's consumer on m (received now).
func (w *sworld) deliverTo(c *container, m *message) *stall.Actor {
	m.receipt++
	m.visibleAt = w.clk.Now().Add(visibility)
	c.msg, c.receipt = m, m.receipt
	job := m.job
	w.logf("receive m%d (%s) on %s, receipt %d, visible again at %s", m.n, job.ID, c.name, m.receipt, m.visibleAt.Sub(t0))
	c.actor = w.spawn("consumer-"+c.name, func(ctx context.Context) error {
		return c.proc.ProcessClaimed(ctx, withdrawal.Ref{Shard: job.Shard, ID: job.ID}, time.UnixMilli(job.Due).UTC())
	})
	w.reap()
	return c.actor
}

// reap deletes the messages whose latest delivery succeeded; a failed one
// stays, invisible until its visibility timeout.
func (w *sworld) reap() {
	for _, c := range w.cons {
		if c.actor == nil || !c.actor.Done() || c.msg == nil {
			continue
		}
		if c.actor.Err() == nil && !w.killed[c.actor] && c.receipt == c.msg.receipt {
			if i := slices.Index(w.sqs, c.msg); i >= 0 {
				w.sqs = slices.Delete(w.sqs, i, i+1)
			}
		}
		w.logf("%s ended: %v", c.actor.Name(), c.actor.Err())
		c.msg = nil
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
	d := rapid.SampledFrom([]time.Duration{time.Second, 10 * time.Second, attemptTimeout + time.Second, visibility,
		2 * time.Minute, tolerance + time.Second, 7 * time.Minute, stallWindow + time.Minute}).Draw(t, "advance")
	w.clk.Advance(d)
	w.logf("advance %s", d)
}

// nearWindow moves the clock to just before, or just past, the end of the
// provider's idempotency window of a withdrawal sent: where a request sent
// again may reach a provider that forgot its key.
func (w *sworld) nearWindow(t *rapid.T) {
	var sent []withdrawal.Withdrawal
	for _, id := range w.ids() {
		if rec, err := w.led.Find(context.Background(), id); err == nil && !rec.FirstSentAt.IsZero() && !rec.Status.Final() {
			sent = append(sent, rec)
		}
	}
	if len(sent) == 0 {
		t.Skip("nothing sent on its way")
	}
	rec := rapid.SampledFrom(sent).Draw(t, "near-window-of")
	to := rec.FirstSentAt.Add(stallWindow + rapid.SampledFrom([]time.Duration{-tolerance, -time.Minute, -10 * time.Second,
		time.Second}).Draw(t, "near-window-by"))
	if !to.After(w.clk.Now()) {
		t.Skip("past it")
	}
	w.clk.Set(to)
	w.logf("advance to %s (the window of %s first sent at %s)", to.Sub(t0), rec.ID, rec.FirstSentAt.Sub(t0))
}

// providerAnswers sets how the provider takes requests it does not know.
func (w *sworld) providerAnswers(t *rapid.T) {
	a := rapid.SampledFrom([]answer{answerPay, answerPay, answerRefuse, answerPending}).Draw(t, "provider-answers")
	w.prov.mu.Lock()
	w.prov.answer = a
	w.prov.mu.Unlock()
	w.logf("the provider answers new requests: %s", a)
}

// providerSettles ends a pending payout at the provider: paid or refused.
func (w *sworld) providerSettles(t *rapid.T) {
	ids := w.prov.with("pending")
	if len(ids) == 0 {
		t.Skip("nothing pending")
	}
	id, pays := rapid.SampledFrom(ids).Draw(t, "pending"), rapid.Bool().Draw(t, "pays")
	w.prov.settle(id, pays)
	w.logf("the provider settles %s: pays %v", id, pays)
}

// providerReturns has a paid payout come back.
func (w *sworld) providerReturns(t *rapid.T) {
	ids := w.prov.with("paid")
	if len(ids) == 0 {
		t.Skip("nothing paid")
	}
	id := rapid.SampledFrom(ids).Draw(t, "returned")
	w.prov.giveBack(id)
	w.logf("the provider: %s returned", id)
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
		told := w.fin.toldOf(id)
		where := fmt.Sprintf("%s (ledger %s maybe=%v attempts=%d resolved=%q; provider %+v; finance %v)", id, rec.Status,
			rec.MaybePaid, rec.Attempts, rec.ResolvedBy, g, told)
		switch {
		case paid && (rec.Status == withdrawal.Cancelled || rec.Status == withdrawal.Failed):
			w.fatalf("paid at the provider, %s in the ledger: %s", rec.Status, where)
		case g.status == "pending" && (rec.Status == withdrawal.Cancelled || rec.Status == withdrawal.Failed):
			w.fatalf("pending at the provider (it may still pay), %s in the ledger: %s", rec.Status, where)
		case g.payouts > 1:
			w.fatalf("paid twice: %s", where)
		case (rec.Status == withdrawal.Paid || rec.Status == withdrawal.Returned) && !paid:
			w.fatalf("%s in the ledger, not paid at the provider: %s", rec.Status, where)
		case rec.Status == withdrawal.Returned && g.status != "returned":
			w.fatalf("returned in the ledger, not at the provider: %s", where)
		case g.status != "" && g.status != "refused" && rec.Cancellable():
			w.fatalf("the provider holds the request (%s), the user may still cancel it: %s", g.status, where)
		case rec.ResolvedBy != "" && rec.Attempts == 0 && rec.FirstSentAt.IsZero():
			w.fatalf("an operator resolved a withdrawal never sent: %s", where)
		}
		for _, st := range told {
			switch {
			case st == withdrawal.Failed && (paid || g.status == "pending"):
				w.fatalf("finance told failed for a payout the provider made or may make: %s", where)
			case (st == withdrawal.Paid || st == withdrawal.Returned) && !paid:
				w.fatalf("finance told %s for a payout the provider did not make: %s", st, where)
			case st == withdrawal.Returned && g.status != "returned":
				w.fatalf("finance told returned for a payout that did not come back: %s", where)
			}
		}
	}
	if len(w.violations) > 0 {
		w.fatalf("%s", strings.Join(w.violations, "; "))
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
		g := w.prov.truth(id)
		fmt.Fprintf(&b, "%s/%v/%d/%s|%s;", rec.Status, rec.MaybePaid, min(rec.Attempts, maxAttempts+1), rec.Told, g.status)
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
	w.prov.down, w.prov.lookDown, w.prov.lagging, w.prov.answer = false, false, false, answerPay
	w.prov.mu.Unlock()
	for _, id := range w.prov.with("pending") {
		w.prov.settle(id, true)
	}
	ctx := context.Background()
	for _, ev := range w.prov.allEvents() {
		body := fmt.Sprintf(`{"event_id":%q,"withdrawal_id":%q,"payout_id":%q,"status":%q,"reason":"model"}`,
			ev.ID, ev.Withdrawal, ev.PayoutID, ev.Status)
		if _, err := httpapi.ApplyCallback(ctx, w.svc, []byte(body)); err != nil && !errors.Is(err, withdrawal.ErrNotFound) {
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
			job := w.sqs[0].job
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
		g := w.prov.truth(id)
		told := w.fin.toldOf(id)
		where := fmt.Sprintf("%s (ledger %s; provider %+v; finance %v)", id, rec.Status, g, told)
		want := map[string][]withdrawal.Status{"paid": {withdrawal.Paid}, "returned": {withdrawal.Returned},
			"refused": {withdrawal.Failed}, "": {withdrawal.Failed, withdrawal.Cancelled}}[g.status]
		if !slices.Contains(want, rec.Status) {
			w.fatalf("%s in the ledger once drained, the provider says %q: %s", rec.Status, g.status, where)
		}
		// Finance hears of the statuses the withdrawal held (paid, then
		// returned), in any order and perhaps more than once, and of the
		// one it ended in.
		held := map[withdrawal.Status][]withdrawal.Status{withdrawal.Paid: {withdrawal.Paid},
			withdrawal.Returned: {withdrawal.Paid, withdrawal.Returned}, withdrawal.Failed: {withdrawal.Failed}}[rec.Status]
		for _, st := range told {
			if !slices.Contains(held, st) {
				w.fatalf("finance was told %s, the withdrawal ended %s: %s", st, rec.Status, where)
			}
		}
		if rec.Status.Reported() && !slices.Contains(told, rec.Status) {
			w.fatalf("finance was not told the outcome: %s", where)
		}
	}
	w.verify()
}

// tally counts how the run's withdrawals ended, and how often the provider
// saw a key it had forgotten, in the report's actions.
func (w *sworld) tally() {
	for _, id := range w.ids() {
		rec, _ := w.led.Find(context.Background(), id)
		how := "end: " + string(rec.Status)
		if rec.ResolvedBy != "" {
			how += " (resolved)"
		}
		w.stats.seen("", how)
	}
	w.prov.mu.Lock()
	n := w.prov.forgotten
	w.prov.mu.Unlock()
	for range n {
		w.stats.seen("", "provider: a forgotten key")
	}
}

func (w *sworld) summary() string {
	var b strings.Builder
	for _, id := range w.ids() {
		rec, _ := w.led.Find(context.Background(), id)
		g := w.prov.truth(id)
		fmt.Fprintf(&b, "\n  %s: %s rev=%d maybe=%v attempts=%d due=%s first-sent=%s sent-until=%s told=%s resolved=%q error=%q; provider %+v; finance %v",
			id, rec.Status, rec.Revision, rec.MaybePaid, rec.Attempts, rec.DueAt.Sub(t0), at(rec.FirstSentAt), at(rec.SentUntil),
			rec.Told, rec.ResolvedBy, rec.LastError, g, w.fin.toldOf(id))
	}
	for _, a := range w.s.Actors() {
		fmt.Fprintf(&b, "\n  actor %s: %v", a, a.Err())
	}
	for _, m := range w.sqs {
		fmt.Fprintf(&b, "\n  message m%d: %s due %s, visible at %s", m.n, m.job.ID, time.UnixMilli(m.job.Due).Sub(t0),
			m.visibleAt.Sub(t0))
	}
	return b.String()
}

// at is t in model time ("-" for none).
func at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(t0).String()
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
			"create":           act("create", w.create),
			"cancel":           act("cancel", w.cancel),
			"reschedule":       act("reschedule", w.reschedule),
			"callback":         act("callback", w.callback),
			"reconcile":        act("reconcile", w.reconcile),
			"poll":             act("poll", func(*rapid.T) { w.poll() }),
			"poller":           act("poller", w.pollActor),
			"resolve":          act("resolve", w.resolve),
			"forged-callback":  act("forged-callback", w.forgedCallback),
			"provider-answers": act("provider-answers", w.providerAnswers),
			"provider-settles": act("provider-settles", w.providerSettles),
			"provider-returns": act("provider-returns", w.providerReturns),
			"near-window":      act("near-window", w.nearWindow),
			"deliver":          act("deliver", w.deliver),
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
				w.prov.lookDown = rapid.IntRange(0, 3).Draw(t, "lookups-down") == 0
				w.prov.mu.Unlock()
			}),
			"": w.check,
		})
		w.drain()
		w.tally()
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
