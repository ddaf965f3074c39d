package seckill_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/redis/go-redis/v9"
	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	"github.com/hourglass/hourglass/internal/dynalitetest"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/consumer"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/httpapi"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/seckill"
)

// A model-based test of the flash sale: rapid draws sequences of actions
// (preheats of 1 to 4 shards, again with another shard count, with or
// without a payment window, purchases, payments that succeed, fail, carry a
// wrong amount or are replayed, the poller handing jobs over (order, expiry
// and event jobs) from the queues the app polls, deliveries and duplicates,
// dead letters, order-ledger writes that fail, hang or lose their answer,
// Lua scripts whose reply is lost and retried at once or after other steps
// (a preheat then stalls between its steps), compensation passes, time
// passing, the item forgotten after its retention) and runs them on the
// real Service, Store, OrderProcessor, consumer and Compensation over a
// real redis-server and a real order ledger. After every step it reads what
// Redis and the ledger hold and checks the invariants of SPEC.md against
// what the model knows; after the last step it lets every purchase settle
// (dead jobs requeued, SQS's dead letters redriven, as an operator would)
// and checks that each ended confirmed xor released, that every order event
// was published, and that no job is left in a queue nobody polls.
//
// Several containers run the flash-sale API (modelContainers), each a
// Service, Store and OrderProcessor of its own over the one Redis, sharing
// the model's clock: each preheat, purchase and payment draws the container
// that runs it. Each Service keeps its own caches: the item's settings
// (settingsTTL), its sold-out and ended memory (modelMemory, production's
// HOURGLASS_SOLDOUT_MEMORY) and the buyers it admitted; the clock takes
// steps shorter than those TTLs, so one container acts on a copy that lags
// behind what another just changed (a purchase under the settings of the
// sale before a re-preheat, a refusal remembered across a restock). A
// lagging cache may refuse, never admit wrongly: a purchase's refusal (not
// one that stalled across steps) is judged against what Redis held within
// the cache's TTL before it (see judgeRefusal).
//
// The test runs each action in a goroutine of its own and waits until it is
// done or parked: a hung ledger call or a script waiting for its retry parks
// until a later "release" step lets it go. Only one goroutine runs at a time,
// so a sequence replays exactly.

const (
	modelItem      = "phone"
	modelUsers     = 4
	modelMaxShards = 4
	// modelContainers run the flash-sale API, each with its own caches.
	modelContainers = 3
	// modelMemory is how long a container remembers an item sold out or
	// ended (HOURGLASS_SOLDOUT_MEMORY's default); modelSettingsTTL how long
	// it trusts its copy of an item's settings (settingsTTL).
	modelMemory      = time.Second
	modelSettingsTTL = time.Second
	modelLease       = time.Minute
	// modelMaxParked bounds the calls parked at once.
	modelMaxParked = 4
)

// modelAdvances are the steps the clock may take: within a lease, past a
// lease, past the hold grace, past the compensation timeout, and within a
// container's caches (settings, sold-out memory), so that a container acts
// on a copy another container's change made stale. (An index names the
// same step in the recorded regressions: new ones go at the end.)
var modelAdvances = []time.Duration{time.Second, 30 * time.Second, 61 * time.Second, 2 * time.Minute, 6 * time.Minute,
	250 * time.Millisecond, 999 * time.Millisecond}

// act is one step: its kind and parameters, and the container that runs
// it (a preheat, purchase or payment), so that a sequence rapid found
// replays as a plain test (see modelRegressions).
type act struct {
	Kind    string
	A, B, C int
	On      int
}

func (a act) String() string {
	return fmt.Sprintf("{%q, %d, %d, %d, %d}", a.Kind, a.A, a.B, a.C, a.On)
}

// Order-ledger faults, for the next ledger call, whoever makes it.
const (
	lfUnavailable = iota // never applied: an error
	lfLost               // applied, its answer lost: an error
	lfResent             // applied, its answer lost, sent again: the second answer
	lfSlow               // parked, then applied
	lfLate               // applied, its answer parked
	lfTimeout            // parked, never applied, then an error
	lfRefused            // never applied: refused for good (ErrPermanent)
	lfKinds
)

var errUnavailable = errors.New("test: order ledger unavailable")

// parker parks the calling goroutine until the driver releases it.
type parker struct{ ch chan *gate }

type gate struct {
	why     string
	release chan struct{}
	task    *task
}

func (p *parker) park(why string) {
	g := &gate{why: why, release: make(chan struct{})}
	p.ch <- g
	<-g.release
}

// faultLedger is an order ledger whose next calls fail, hang or lose their
// answer as armed.
type faultLedger struct {
	inner seckill.OrderLedger
	park  func(why string)

	mu    sync.Mutex
	armed []int
}

func (l *faultLedger) arm(kind int) {
	l.mu.Lock()
	l.armed = append(l.armed, kind)
	l.mu.Unlock()
}

func (l *faultLedger) disarm() {
	l.mu.Lock()
	l.armed = nil
	l.mu.Unlock()
}

func (l *faultLedger) pending() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.armed)
}

func (l *faultLedger) next() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.armed) == 0 {
		return 0, false
	}
	f := l.armed[0]
	l.armed = l.armed[1:]
	return f, true
}

func (l *faultLedger) do(what string, call func() error) error {
	f, ok := l.next()
	if !ok {
		return call()
	}
	switch f {
	case lfUnavailable:
		return fmt.Errorf("%w (%s)", errUnavailable, what)
	case lfLost:
		_ = call()
		return fmt.Errorf("%w (%s)", errLost, what)
	case lfResent:
		_ = call()
		return call()
	case lfSlow:
		l.park("slow " + what)
		return call()
	case lfLate:
		err := call()
		l.park("late answer of " + what)
		return err
	case lfTimeout:
		l.park("timeout of " + what)
		return fmt.Errorf("%w (%s)", errLost, what)
	default:
		return fmt.Errorf("%w: test: refused (%s)", seckill.ErrPermanent, what)
	}
}

func (l *faultLedger) CreateOrder(ctx context.Context, o seckill.Order) error {
	return l.do("create "+o.ID, func() error { return l.inner.CreateOrder(ctx, o) })
}

func (l *faultLedger) VoidOrder(ctx context.Context, o seckill.Order) (bool, error) {
	var ordered bool
	err := l.do("void "+o.ID, func() error {
		var err error
		ordered, err = l.inner.VoidOrder(ctx, o)
		return err
	})
	return ordered, err
}

func (l *faultLedger) FindOrder(ctx context.Context, o seckill.Order) (seckill.Order, error) {
	var got seckill.Order
	err := l.do("find "+o.ID, func() error {
		var err error
		got, err = l.inner.FindOrder(ctx, o)
		return err
	})
	return got, err
}

func (l *faultLedger) SettlePayment(ctx context.Context, p seckill.Payment) (seckill.Order, seckill.PaymentResult, error) {
	var o seckill.Order
	var r seckill.PaymentResult
	err := l.do("pay "+p.OrderID, func() error {
		var err error
		o, r, err = l.inner.SettlePayment(ctx, p)
		return err
	})
	return o, r, err
}

func (l *faultLedger) ExpireOrder(ctx context.Context, o seckill.Order, now time.Time) (seckill.OrderEnd, error) {
	var end seckill.OrderEnd
	err := l.do("expire "+o.ID, func() error {
		var err error
		end, err = l.inner.ExpireOrder(ctx, o, now)
		return err
	})
	return end, err
}

// scriptFaults is a go-redis hook that makes the reply of the next calls of
// the flash sale's Lua scripts (by name) get lost, as armed: the script ran, and
// go-redis runs it again with the same arguments, at once or (delayed) once
// the driver releases it; the caller gets the second answer.
type scriptFaults struct {
	names map[string]string // sha1 -> script file

	mu    sync.Mutex
	armed []scriptFault
	park  func(why string)
}

type scriptFault struct {
	script  string
	delayed bool
}

// modelScripts are the scripts a Redis fault may hit (redisFault's A): an
// index names the same script in the recorded regressions, so new ones go
// at the end (reset.lua took the place of the one-step preheat.lua).
var modelScripts = []string{"admit.lua", "end_order.lua", "reset.lua", "repair.lua", "settle.lua", "settle_order.lua", "take.lua",
	"unclaim.lua", "freeze.lua", "unfreeze.lua", "preheat_begin.lua", "preheat_move.lua", "preheat_end.lua", "register.lua",
	"retire.lua", "enqueue_event.lua", "registry_trim.lua", "unindex.lua"}

func newScriptFaults(t testing.TB) *scriptFaults {
	t.Helper()
	files, err := filepath.Glob("lua/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("the seckill scripts: %v %v", files, err)
	}
	f := &scriptFaults{names: map[string]string{}}
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		f.names[hex.EncodeToString(sum[:])] = filepath.Base(file)
	}
	return f
}

func (f *scriptFaults) reset(park func(string)) {
	f.mu.Lock()
	f.armed, f.park = nil, park
	f.mu.Unlock()
}

func (f *scriptFaults) arm(sf scriptFault) {
	f.mu.Lock()
	f.armed = append(f.armed, sf)
	f.mu.Unlock()
}

func (f *scriptFaults) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.armed)
}

func (f *scriptFaults) script(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	s, _ := args[1].(string)
	switch cmd.Name() {
	case "evalsha":
		return f.names[s]
	case "eval":
		sum := sha1.Sum([]byte(s))
		return f.names[hex.EncodeToString(sum[:])]
	}
	return ""
}

// take returns the fault armed for this call of script, if any.
func (f *scriptFaults) take(script string) (scriptFault, func(string), bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, sf := range f.armed {
		if sf.script == script {
			f.armed = slices.Delete(f.armed, i, i+1)
			return sf, f.park, true
		}
	}
	return scriptFault{}, nil, false
}

func (f *scriptFaults) putBack(sf scriptFault) {
	f.mu.Lock()
	f.armed = append([]scriptFault{sf}, f.armed...)
	f.mu.Unlock()
}

func (f *scriptFaults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *scriptFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := f.script(cmd)
		if name == "" {
			return next(ctx, cmd)
		}
		sf, park, ok := f.take(name)
		if !ok {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			if redis.HasErrorPrefix(err, "NOSCRIPT") {
				f.putBack(sf) // it did not run: the fault is for the EVAL that follows
			}
			return err
		}
		// Delayed, the caller stalls between two of its steps (a preheat
		// too: the others see its shards frozen, its intent open).
		if sf.delayed {
			park("retry of " + name)
		}
		return next(ctx, cmd)
	}
}

func (f *scriptFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// modelEnv is one backend of the model, shared by its runs.
type modelEnv struct {
	b      orderBackend
	faults *scriptFaults

	runs, steps int
	// firstAt is the run that found the first violation; the runs after it
	// are rapid shrinking it.
	firstAt int
	states  map[uint64]bool
	kinds   map[string]int
}

// sale is a preheat as the model knows it.
type sale struct {
	n                    int
	stock, shards, limit int
	// window: its orders await payment (modelPrice CNY) for modelWindow.
	window bool
	// version is the sale's in Redis (a preheat recovery rolled forward
	// becomes the model's sale as Redis shows it).
	version string
}

// A sale with a payment window sells at modelPrice for modelWindow.
const (
	modelPrice  = "2.50"
	modelWindow = 60 * time.Second
)

// payAnswer is the first answer a payment event got.
type payAnswer struct {
	err    string
	status seckill.PurchaseStatus
	result seckill.PaymentOutcome
}

// mPurchase is a purchase as the model knows it.
type mPurchase struct {
	pid, user string
	qty       int
	sale      int
	status    seckill.PurchaseStatus
}

// message is an order job handed over (to SQS, or to the local consumer
// under its lease).
type message struct {
	seq    int
	job    delayq.Job
	leased bool
}

type task struct {
	what   string
	done   chan struct{}
	err    error
	finish func(error)
}

// container is one instance of the flash-sale API, with its own caches.
type container struct {
	svc   *seckill.Service
	store *seckill.Store
	proc  *seckill.OrderProcessor
}

type machine struct {
	env *modelEnv
	t   rapid.TB
	ctx context.Context
	clk *clock.Fake
	// cs are the containers; the consumer, the poller and the compensation
	// pass (which cache nothing) run on the first one's Store and
	// OrderProcessor.
	cs      []*container
	store   *seckill.Store
	proc    *seckill.OrderProcessor
	consume consumer.JobFunc
	comp    *seckill.Compensation
	orders  *faultLedger
	queue   *delayq.Queue // the item's queue over every shard the model uses
	events  *delayq.Queue // the events queue
	parker  *parker
	parked  []*gate
	sale    *sale
	// expect is the sale of a preheat that answered done, until the model
	// sees it in Redis; its n is the sale current when the preheat began.
	expect *sale
	// sales are every sale the model adopted, in order.
	sales []sale
	// published are the order events out, "<type>|<order>|<payment event>".
	published map[string]bool
	// sqsDLQ are messages SQS gave up on (the AWS wiring's dead letters),
	// which an operator redrives.
	sqsDLQ []*message
	known  map[string]*mPurchase
	bag    []*message
	seq    int
	log    []act
	// payments are the payment events sent, by id, with their body and
	// first answer; lastPay the latest id.
	payments map[string]*sentPayment
	lastPay  string
	// seen is what Redis showed last, by when (see judgeRefusal).
	seen seen
	// last is what the last check read.
	last truth
	// releases counts the parked calls let go (a release step, or the
	// drain at the end of a run): a purchase answered with no release
	// since it began saw no other call's change.
	releases int
	// pending are the preheats under way, each told after every step
	// whether a purchase of the current sale waited then (see preheat).
	pending []*bool
}

// seen is the last instant at which Redis showed each state a cache may
// remember: the item unknown, the sale sold out, the sale ended, and each
// user a buyer of the current sale. A refusal from a cache is right if
// its state held at some instant within the cache's TTL.
type seen struct {
	unknown, soldOut, ended time.Time
	buyer                   map[string]time.Time
}

type sentPayment struct {
	body    []byte
	first   *payAnswer
	order   string // the order it paid
	orderID string // the order it is for
}

func newMachine(t rapid.TB, env *modelEnv) *machine {
	ctx := context.Background()
	if err := env.b.reset(ctx); err != nil {
		t.Fatalf("reset: %v", err)
	}
	m := &machine{env: env, t: t, ctx: ctx, clk: clock.NewFake(t0), parker: &parker{ch: make(chan *gate)},
		known: map[string]*mPurchase{}, payments: map[string]*sentPayment{}, published: map[string]bool{}}
	env.faults.reset(m.parker.park)
	// Before the first preheat the item is unknown.
	m.seen = seen{unknown: m.clk.Now(), buyer: map[string]time.Time{}}
	m.orders = &faultLedger{inner: env.b.ledger(), park: m.parker.park}
	var mu sync.Mutex
	publish := orders.PublisherFunc(func(_ context.Context, e orders.Event) error {
		mu.Lock()
		m.published[e.Type+"|"+e.OrderID+"|"+e.PaymentEventID] = true
		mu.Unlock()
		return nil
	})
	for range modelContainers {
		store := seckill.NewStore(env.b.rdb, "hg:")
		svc, err := seckill.NewService(seckill.Config{Store: store, Clock: m.clk, Logger: quiet, Memory: modelMemory})
		if err != nil {
			t.Fatal(err)
		}
		proc := seckill.NewOrderProcessor(store, m.orders, m.clk, quiet)
		proc.Publisher = publish
		m.cs = append(m.cs, &container{svc: svc, store: store, proc: proc})
	}
	m.store, m.proc = m.cs[0].store, m.cs[0].proc
	var err error
	m.consume = consumer.Orders(m.proc)
	m.comp = &seckill.Compensation{Store: m.store, Orders: m.orders, Clock: m.clk, Log: quiet}
	if m.queue, err = m.store.Queue(modelItem, modelMaxShards); err != nil {
		t.Fatal(err)
	}
	m.events = m.store.EventsQueue()
	return m
}

// stop lets every parked call go, with no fault armed, and waits for them.
func (m *machine) stop() { m.unpark(false) }

// unpark lets every parked call go, with no fault armed, one at a time;
// with check, it checks the invariants after each, as after a step.
func (m *machine) unpark(check bool) {
	m.orders.disarm()
	m.env.faults.reset(m.parker.park)
	for len(m.parked) > 0 {
		g := m.parked[0]
		m.parked = m.parked[1:]
		close(g.release)
		m.releases++
		m.await(g.task)
		if check {
			m.check()
		}
	}
}

// run runs fn as a task and waits until it is done or parked.
func (m *machine) run(what string, fn func() error, finish func(error)) {
	tk := &task{what: what, done: make(chan struct{}), finish: finish}
	go func() {
		defer close(tk.done)
		defer func() {
			if r := recover(); r != nil {
				tk.err = fmt.Errorf("panic: %v", r)
			}
		}()
		tk.err = fn()
	}()
	m.await(tk)
}

func (m *machine) await(tk *task) {
	// Not a timing assertion: a guard so that a deadlock fails the test
	// instead of hanging it.
	guard := time.NewTimer(2 * time.Minute)
	defer guard.Stop()
	select {
	case <-tk.done:
		if tk.finish != nil {
			tk.finish(tk.err)
		}
	case g := <-m.parker.ch:
		g.task = tk
		m.parked = append(m.parked, g)
	case <-guard.C:
		m.t.Fatalf("model: %s neither ended nor parked", tk.what)
	}
}

func (m *machine) violate(kind, format string, args ...any) {
	m.t.Helper()
	if len(m.env.kinds) == 0 {
		m.env.firstAt = m.env.runs
	}
	m.env.kinds[kind]++
	// The message rapid compares across replays names the invariant only:
	// ids differ from run to run.
	m.t.Logf("VIOLATION %s: %s\nsteps: %s", kind, fmt.Sprintf(format, args...), m.sequence())
	m.t.Fatalf("VIOLATION %s", kind)
}

func (m *machine) sequence() string {
	parts := make([]string, len(m.log))
	for i, a := range m.log {
		parts[i] = a.String()
	}
	return "[]act{" + strings.Join(parts, ", ") + "}"
}

// expected reports whether err is one the injected faults explain.
func expected(err error) bool {
	return err == nil || errors.Is(err, errLost) || errors.Is(err, errUnavailable) || errors.Is(err, seckill.ErrPermanent)
}

// apply runs one step, then checks every invariant.
func (m *machine) apply(a act) {
	m.t.Helper()
	m.log = append(m.log, a)
	m.t.Logf("step %d: %s", len(m.log), a)
	m.do(a)
	if m.reserved() > 0 {
		for _, saw := range m.pending {
			*saw = true
		}
	}
	tr := m.check()
	m.env.steps++
	m.env.states[m.abstract(tr)] = true
}

func (m *machine) do(a act) {
	switch a.Kind {
	case "preheat":
		m.preheat(m.on(a), a.A, a.B, a.C, false)
	case "preheatPaid":
		m.preheat(m.on(a), a.A, a.B, a.C, true)
	case "pay":
		m.pay(m.on(a), a.A, a.B)
	case "buy":
		m.buy(m.on(a), a.A, a.B)
	case "poll":
		m.poll(a.A == 1)
	case "deliver":
		m.deliver(a.A, a.B == 1)
	case "dlq":
		m.deadLetter(a.A)
	case "ledgerFault":
		m.orders.arm(a.A % lfKinds)
	case "redisFault":
		m.env.faults.arm(scriptFault{script: modelScripts[a.A%len(modelScripts)], delayed: a.B == 1})
	case "compensate":
		m.run("compensation", func() error {
			_, err := m.comp.Run(m.ctx, m.clk.Now())
			return err
		}, func(err error) {
			if !expected(err) {
				m.violate("unexpected error", "compensation: %v", err)
			}
		})
	case "advance":
		m.clk.Advance(modelAdvances[a.A%len(modelAdvances)])
	case "forget":
		// Past the sale's end (a day after its preheat) and its retention:
		// the item is forgotten once its every queue is empty.
		m.clk.Advance(24*time.Hour + seckill.DefaultRetention + time.Minute)
		m.do(act{Kind: "compensate"})
	case "release":
		if len(m.parked) > 0 {
			i := a.A % len(m.parked)
			g := m.parked[i]
			m.parked = slices.Delete(m.parked, i, i+1)
			close(g.release)
			m.releases++
			m.await(g.task)
		}
	default:
		m.t.Fatalf("model: no action %q", a.Kind)
	}
}

// on is the container that runs a.
func (m *machine) on(a act) *container { return m.cs[a.On%len(m.cs)] }

// reserved is the units of the current sale still waiting for their order
// or their payment, as the model last saw them.
func (m *machine) reserved() int {
	n := 0
	for _, p := range m.known {
		if m.sale != nil && p.sale == m.sale.n && (p.status == seckill.Reserved || p.status == seckill.AwaitingPayment) {
			n += p.qty
		}
	}
	return n
}

func (m *machine) preheat(c *container, stock, shards, limit int, window bool) {
	shards = min(shards, stock)
	from := -1
	if m.sale != nil {
		from = m.sale.n
	}
	cmd := seckill.Sale{ItemID: modelItem, Stock: int64(stock), Shards: shards, PerUserLimit: limit,
		EndsAt: m.clk.Now().Add(24 * time.Hour)}
	if window {
		cmd = terms{modelPrice, "CNY", modelWindow}.of(cmd)
	}
	// Orders pending is judged against every step the preheat spanned:
	// its freeze may have found a purchase waiting that was confirmed or
	// expired before the preheat, stalled in its abort, answered.
	saw := new(m.reserved() > 0)
	m.pending = append(m.pending, saw)
	m.run("preheat", func() error {
		_, err := c.svc.Preheat(m.ctx, cmd)
		return err
	}, func(err error) {
		m.pending = slices.DeleteFunc(m.pending, func(p *bool) bool { return p == saw })
		// Judged when it answers (it may have stalled across steps).
		// (Done is judged first: expected(nil) holds too, and a preheat
		// that answered done went unadopted until the next check, so that
		// a purchase answered meanwhile counted in the sale before. That
		// no purchase of the sale before was still reserved, adopt checks
		// as it sees the sale change: the model may have adopted this
		// preheat's sale before it answered, and purchases since.)
		switch {
		case err == nil:
			m.expect = &sale{n: from, stock: stock, shards: shards, limit: limit, window: window}
			m.adopt()
		case errors.Is(err, seckill.ErrOrdersPending):
			if !*saw && m.reserved() == 0 {
				m.violate("preheat refused", "no purchase waited for its order while it ran, yet: %v", err)
			}
		case errors.Is(err, seckill.ErrPreheatInProgress), errors.Is(err, seckill.ErrPreheatAbandoned), expected(err):
			// Refused while another is under way, or finished by recovery
			// (the model learns the outcome from Redis), or cut short by a
			// fault (its intent's deadline lets recovery finish it).
		default:
			m.violate("unexpected error", "preheat: %v", err)
		}
	})
}

// adopt makes the sale Redis holds the model's, if it is a new one: that of
// a preheat that answered done, or one a recovery rolled forward. Every
// purchase of the sale before must have settled: a preheat never drops one.
// It returns shard 0's meta, as it read it.
func (m *machine) adopt() map[string]string {
	meta, err := m.env.b.rdb.HGetAll(m.ctx, delayq.KeysOf("hg:", seckill.QueueName(modelItem), 0).Key("meta")).Result()
	if err != nil {
		m.t.Fatal(err)
	}
	if meta["version"] == "" || (m.sale != nil && meta["version"] == m.sale.version) {
		// A preheat that stalled after its commit answers done once it
		// finished: the model adopted its sale already, rolling forward.
		if e := m.expect; e != nil && (meta["version"] == "" || !m.appliedSince(*e)) {
			m.violate("preheat not applied", "a preheat of %+v answered done, Redis holds %v", *e, meta)
		}
		m.expect = nil
		return meta
	}
	if reserved := m.reserved(); reserved > 0 {
		m.violate("preheat dropped purchases", "%d units still reserved when the sale changed to version %s", reserved, meta["version"])
	}
	// A preheat rolling forward has reset some shards, not all yet: its
	// intent says what the sale is. Closed, every shard must hold it.
	in, err := m.env.b.rdb.HGetAll(m.ctx, "hg:{sk:"+modelItem+"}:preheat").Result()
	if err != nil {
		m.t.Fatal(err)
	}
	var got *sale
	if in["version"] == meta["version"] && in["phase"] == "committed" {
		num := func(f string) int { v, _ := strconv.Atoi(in[f]); return v }
		got = &sale{stock: num("stock"), shards: num("shards"), limit: num("limit"), window: num("window") != 0,
			version: meta["version"]}
	} else {
		shards, _ := strconv.Atoi(meta["shards"])
		limit, _ := strconv.Atoi(meta["limit"])
		got = &sale{shards: shards, limit: limit, window: meta["window"] != "0" && meta["window"] != "", version: meta["version"]}
		for n := range shards {
			mn, err := m.env.b.rdb.HGetAll(m.ctx, delayq.KeysOf("hg:", seckill.QueueName(modelItem), n).Key("meta")).Result()
			if err != nil {
				m.t.Fatal(err)
			}
			// Its preheat closed, every shard holds it, frozen only by a
			// later preheat under way (its intent open).
			if mn["version"] != got.version || (mn["frozen"] != "" && (in["phase"] == "" || mn["frozen"] != in["version"])) {
				m.violate("preheat half applied", "shard %d of a sale of %d shards (version %s, preheat closed): %v; intent %v",
					n, shards, got.version, mn, in)
			}
			v, _ := strconv.Atoi(mn["stock"])
			got.stock += v
		}
	}
	if m.sale != nil {
		got.n = m.sale.n + 1
	}
	m.sale = got
	m.sales = append(m.sales, *got)
	if m.expect != nil && !m.appliedSince(*m.expect) {
		m.violate("preheat not applied", "a preheat of %+v answered done, Redis holds %+v", *m.expect, *got)
	}
	m.expect = nil
	return meta
}

// appliedSince reports whether the model saw sale e in Redis after sale
// e.n (the one current when its preheat began): a preheat that stalled
// before it answered done may have been followed by another.
func (m *machine) appliedSince(e sale) bool {
	for _, s := range m.sales {
		if s.n > e.n && s.stock == e.stock && s.shards == e.shards && s.limit == e.limit && s.window == e.window {
			return true
		}
	}
	return false
}

func userName(i int) string { return "u" + strconv.Itoa(i) }

// Payment kinds of a "pay" step.
const (
	paySucceeded = iota
	payFailed
	payWrongAmount
	payReplay // the latest event again, as the provider resends it
	payKinds
)

// pay sends the payment provider's confirmation of the i-th purchase of the
// current sale (in id order): a new event of kind, or the latest again.
func (m *machine) pay(c *container, i, kind int) {
	var id string
	var body []byte
	if kind == payReplay {
		if m.lastPay == "" {
			return
		}
		id, body = m.lastPay, m.payments[m.lastPay].body
	} else {
		var pids []string
		for pid, p := range m.known {
			if m.sale != nil && p.sale == m.sale.n {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return
		}
		slices.Sort(pids)
		p := m.known[pids[i%len(pids)]]
		status, amount := "succeeded", decimal.RequireFromString(modelPrice).Mul(decimal.NewFromInt(int64(p.qty))).StringFixed(2)
		switch kind {
		case payFailed:
			status = "failed"
		case payWrongAmount:
			amount = "0.01"
		}
		id = "evt-" + strconv.Itoa(len(m.payments))
		body = payBody(id, seckill.OrderID(p.pid), status, amount, "CNY")
		m.payments[id] = &sentPayment{body: body, orderID: seckill.OrderID(p.pid)}
		m.lastPay = id
	}
	sent := m.payments[id]
	var ans seckill.PaymentAnswer
	m.run("payment "+id, func() error {
		var err error
		ans, err = httpapi.ApplyPayment(m.ctx, c.proc, body)
		return err
	}, func(err error) {
		switch {
		case errors.Is(err, seckill.ErrNoOrder), errors.Is(err, seckill.ErrPaymentMismatch):
		case !expected(err):
			m.violate("unexpected error", "payment %s: %v", id, err)
		}
		if err != nil && !errors.Is(err, seckill.ErrPaymentMismatch) {
			return // the provider sends it again; nothing was answered
		}
		got := &payAnswer{status: ans.Status, result: ans.Result}
		if err != nil {
			got = &payAnswer{err: "mismatch"}
		}
		if sent.first == nil {
			sent.first = got
			// One payment pays an order; any other is refunded.
			if got.result == seckill.OutcomePaid {
				order := ans.OrderID
				for other, o := range m.payments {
					if other != id && o.first != nil && o.first.result == seckill.OutcomePaid && o.order == order {
						m.violate("paid twice", "order %s paid by events %s and %s", order, other, id)
					}
				}
				sent.order = order
			}
			return
		}
		// Applied once: a replay answers as the first time. (Only the
		// status may differ: the first answer saw the order before
		// Redis followed its end.)
		if got.err != sent.first.err || got.result != sent.first.result {
			m.violate("payment applied twice", "event %s answered %+v, first %+v", id, *got, *sent.first)
		}
	})
}

func (m *machine) buy(c *container, user, qty int) {
	if m.sale == nil {
		return
	}
	name := userName(user)
	// What Redis held when the purchase began: the last step's reading.
	step, released, bought, limit := len(m.log), m.releases, entryTotal(m.last.entries[name]), m.sale.limit
	var p seckill.Purchase
	m.run("purchase", func() error {
		var err error
		p, err = c.svc.Purchase(m.ctx, modelItem, name, qty)
		return err
	}, func(err error) {
		if err != nil {
			switch {
			case errors.Is(err, seckill.ErrSoldOut), errors.Is(err, seckill.ErrAlreadyPurchased),
				errors.Is(err, seckill.ErrNotFound), errors.Is(err, seckill.ErrNotStarted), errors.Is(err, seckill.ErrEnded),
				errors.Is(err, seckill.ErrPreheating), strings.Contains(err.Error(), "quantity"),
				strings.Contains(err.Error(), "keeps being preheated"):
			default:
				m.violate("unexpected error", "purchase: %v", err)
			}
			if len(m.log) == step && m.releases == released { // answered in its own step: it saw no other call's change
				m.judgeRefusal(name, qty, bought, limit, err)
			}
			return
		}
		// Of the sale current now: a purchase whose script retry waited
		// across a preheat was admitted (if at all) under the new one.
		if k := m.known[p.ID]; k == nil {
			m.known[p.ID] = &mPurchase{pid: p.ID, user: name, qty: p.Quantity, sale: m.sale.n, status: seckill.Reserved}
		}
	})
}

// entryTotal is the units a buyer's entry counts against the limit.
func entryTotal(entry string) int {
	total, _, _ := strings.Cut(entry, "|")
	n, _ := strconv.Atoi(total)
	return n
}

// judgeRefusal checks that a purchase refusal is true of Redis, or was
// within the TTL of the cache it may come from (SPEC.md, invariant 7:
// caches lag, by up to their TTL): sold out or ended (the container's
// memory, modelMemory), unknown (its copy of the settings,
// modelSettingsTTL), limit reached (the buyer's units before the purchase
// and qty over the limit, or, remembered sold out, a buyer of the sale
// within modelMemory: a retry after success answers already_purchased).
// bought and limit are the buyer's units and the limit before the purchase.
func (m *machine) judgeRefusal(user string, qty, bought, limit int, err error) {
	m.t.Helper()
	now := m.clk.Now()
	within := func(at time.Time, ttl time.Duration) bool {
		return !at.IsZero() && !now.Before(at) && now.Sub(at) < ttl
	}
	last := func(at time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return now.Sub(at).String() + " before"
	}
	switch {
	case errors.Is(err, seckill.ErrNotEnoughLeft):
	case errors.Is(err, seckill.ErrSoldOut):
		if !within(m.seen.soldOut, modelMemory) {
			m.violate("wrong refusal", "%s refused as sold out; Redis last showed the sale sold out %s", user, last(m.seen.soldOut))
		}
	case errors.Is(err, seckill.ErrEnded):
		if !within(m.seen.ended, modelMemory) {
			m.violate("wrong refusal", "%s refused as ended; Redis last showed the sale ended %s", user, last(m.seen.ended))
		}
	case errors.Is(err, seckill.ErrNotFound):
		if !within(m.seen.unknown, modelSettingsTTL) {
			m.violate("wrong refusal", "%s refused as unknown; Redis last showed the item unknown %s", user, last(m.seen.unknown))
		}
	case errors.Is(err, seckill.ErrAlreadyPurchased):
		if bought+qty <= limit && !within(m.seen.buyer[user], modelMemory) {
			m.violate("wrong refusal", "%s refused as already purchased with %d of %d units bought and %d asked for; "+
				"Redis last showed them a buyer of the sale %s", user, bought, limit, qty, last(m.seen.buyer[user]))
		}
	}
}

// observe notes what Redis shows now that a cache may remember (see seen);
// meta0 is shard 0's meta, where the settings are read.
func (m *machine) observe(tr truth, meta0 map[string]string) {
	now := m.clk.Now()
	if meta0["version"] == "" {
		m.seen.unknown = now
		return
	}
	if ends, err := strconv.ParseInt(meta0["ends"], 10, 64); err == nil && now.UnixMilli() >= ends {
		m.seen.ended = now
	}
	if m.sale == nil {
		return
	}
	for _, p := range m.known {
		if p.sale == m.sale.n {
			m.seen.buyer[p.user] = now
		}
	}
	// Sold out: every shard of the sale reset for it, none frozen or
	// retired, none with stock left.
	if len(tr.metas) != m.sale.shards {
		return
	}
	for _, meta := range tr.metas {
		if meta["version"] != m.sale.version || meta["frozen"] != "" || meta["retired"] != "" ||
			(meta["left:"+meta["version"]] != "" && meta["left:"+meta["version"]] != "0") {
			return
		}
	}
	m.seen.soldOut = now
}

// poll is the poller's round over every shard of every queue the app
// polls (the registered items' polled shards and the events queue): with
// ack, the AWS wiring (SQS holds the job, it leaves Redis); without, the
// local one (the job stays leased until its consumer acks it).
func (m *machine) poll(ack bool) {
	qs, err := m.store.Queues(m.ctx)
	if err != nil {
		m.t.Fatalf("queues: %v", err)
	}
	for _, q := range qs {
		for n := range q.Shards() {
			c, err := q.Claim(m.ctx, n, m.clk.Now(), modelLease, 10)
			if err != nil {
				m.t.Fatalf("claim: %v", err)
			}
			for _, j := range c.Jobs {
				m.seq++
				m.bag = append(m.bag, &message{seq: m.seq, job: j, leased: !ack})
				if ack {
					if _, err := q.Ack(m.ctx, n, c.Lease, j.ID); err != nil {
						m.t.Fatalf("ack: %v", err)
					}
				}
			}
		}
	}
}

// queueOf is the queue of job j.
func (m *machine) queueOf(j delayq.Job) *delayq.Queue {
	if j.Queue == seckill.EventsQueue {
		return m.events
	}
	return m.queue
}

// deliver hands a message to the consumer; with dup, the message stays
// (at-least-once delivery hands it over again).
func (m *machine) deliver(i int, dup bool) {
	if len(m.bag) == 0 {
		return
	}
	msg := m.bag[i%len(m.bag)]
	m.run("delivery of "+msg.job.ID, func() error {
		return m.consume(m.ctx, msg.job)
	}, func(err error) {
		if !expected(err) {
			m.violate("unexpected error", "delivery of %s: %v", msg.job.ID, err)
		}
		if err != nil {
			return // SQS delivers it again; a lease expires
		}
		if msg.leased {
			if _, err := m.queueOf(msg.job).Ack(m.ctx, msg.job.Shard, msg.job.Lease, msg.job.ID); err != nil {
				m.t.Fatalf("ack: %v", err)
			}
		}
		if !dup {
			m.drop(msg.seq)
		}
	})
}

func (m *machine) drop(seq int) {
	m.bag = slices.DeleteFunc(m.bag, func(x *message) bool { return x.seq == seq })
}

// deadLetter gives up on a message (SQS's redrive to the dead-letter queue;
// locally the consumer kills the job).
func (m *machine) deadLetter(i int) {
	if len(m.bag) == 0 {
		return
	}
	msg := m.bag[i%len(m.bag)]
	m.drop(msg.seq)
	if !msg.leased {
		m.sqsDLQ = append(m.sqsDLQ, msg) // in SQS's dead-letter queue
		return
	}
	err := m.queueOf(msg.job).Kill(m.ctx, msg.job.Shard, msg.job.ID, msg.job.Lease, m.clk.Now())
	if err != nil && !errors.Is(err, delayq.ErrLeaseLost) {
		m.t.Fatalf("kill: %v", err)
	}
}

// operate is what an operator does with what failed every delivery: the
// dead jobs of every queue the app polls requeued (`hourglass dead requeue
// --all`), and SQS's dead letters redriven.
func (m *machine) operate() {
	qs, err := m.store.Queues(m.ctx)
	if err != nil {
		m.t.Fatalf("queues: %v", err)
	}
	for _, q := range qs {
		for n := range q.Shards() {
			if _, err := q.RequeueDead(m.ctx, n, m.clk.Now(), delayq.MaxBatch); err != nil {
				m.t.Fatalf("requeue: %v", err)
			}
		}
	}
	m.bag = append(m.bag, m.sqsDLQ...)
	m.sqsDLQ = nil
}

// queued counts the jobs of each shard of the item's queue and of the
// events queue, polled or not: "<queue>/<shard>" -> jobs due, leased or
// dead.
func (m *machine) queued() map[string]int64 {
	out := map[string]int64{}
	for _, q := range []*delayq.Queue{m.queue, m.events} {
		for n := range q.Shards() {
			k := q.Keys(n)
			for _, key := range []string{k.Due, k.Inflight, k.Dead} {
				c, err := m.env.b.rdb.ZCard(m.ctx, key).Result()
				if err != nil {
					m.t.Fatal(err)
				}
				if c > 0 {
					out[fmt.Sprintf("%s/%d", q.Name(), n)] += c
				}
			}
		}
	}
	return out
}

// settle ends the run: nothing fails any more, every parked call goes on,
// and the pipeline runs (with time passing for the compensation pass, and an
// operator requeueing what died) until no purchase is reserved and no job
// waits in a queue the app polls. Then every order event must have gone
// out, and no job be left where nobody polls.
func (m *machine) settle() {
	m.unpark(true)
	for round := 0; ; round++ {
		m.check()
		tr := m.read()
		if tr.reserved() == 0 && tr.holds == 0 && tr.awaiting() == 0 && len(m.bag) == 0 && len(m.sqsDLQ) == 0 &&
			m.polledEmpty() {
			break
		}
		if round == 20 {
			m.violate("never settled", "purchases still reserved or held, or jobs queued, after %d rounds: %s; queued %v",
				round, tr.describe(), m.queued())
		}
		m.operate()
		m.poll(false)
		for _, msg := range slices.Clone(m.bag) {
			if i := slices.Index(m.bag, msg); i >= 0 {
				m.deliver(i, false)
			}
		}
		m.clk.Advance(2 * time.Minute)
		m.do(act{Kind: "compensate"})
		m.check()
	}
	tr := m.check()
	for _, p := range m.known {
		switch p.status {
		case seckill.Confirmed, seckill.Released, seckill.Paid, seckill.Expired:
		default:
			m.violate("never settled", "purchase %s of %s is %s", p.pid, p.user, p.status)
		}
	}
	if left := m.queued(); len(left) > 0 {
		m.violate("job stranded", "jobs left in queues nobody polls: %v", left)
	}
	m.eventsDelivered()
	// A released or expired purchase gave its quantity back to its buyer's limit.
	for _, p := range tr.purchases {
		// One its buyer's entry does not list counts against nothing: a
		// purchase whose hold was given back (its take's answer was lost)
		// before the take went through late, and which was then released.
		if (p.status == seckill.Released || p.status == seckill.Expired) && p.listed && !p.given {
			m.violate("limit not given back", "%s's released purchase %s still counts against the limit: %q", p.user, p.pid, tr.entries[p.user])
		}
	}
}

// polledEmpty reports whether every queue the app polls is empty.
func (m *machine) polledEmpty() bool {
	qs, err := m.store.Queues(m.ctx)
	if err != nil {
		m.t.Fatalf("queues: %v", err)
	}
	for _, q := range qs {
		st, err := q.Stats(m.ctx, m.clk.Now())
		if err != nil {
			m.t.Fatal(err)
		}
		if st.Due+st.Inflight+st.Dead > 0 {
			return false
		}
	}
	return true
}

// eventsDelivered checks, once everything settled, that every order the
// ledger holds had its order.created event published, its order.paid or
// order.expired once it ended so, and every payment answered
// refund_required its payment.refund_required event.
func (m *machine) eventsDelivered() {
	entries, err := m.env.b.entries(m.ctx, modelItem, modelMaxShards)
	if err != nil {
		m.t.Fatalf("read the ledger: %v", err)
	}
	var missing []string
	want := func(key string) {
		if !m.published[key] {
			missing = append(missing, key)
		}
	}
	for id, e := range entries {
		if e.voided {
			continue
		}
		want(orders.Created + "|" + id + "|")
		o, err := m.orders.inner.FindOrder(m.ctx, seckill.Order{ID: id})
		if err != nil && !errors.Is(err, seckill.ErrNoOrder) {
			m.t.Fatalf("read order %s: %v", id, err)
		}
		switch o.End {
		case seckill.EndPaid:
			want(orders.Paid + "|" + id + "|")
		case seckill.EndExpired:
			want(orders.Expired + "|" + id + "|")
		}
	}
	for event, sp := range m.payments {
		if sp.first != nil && sp.first.result == seckill.OutcomeRefund {
			want(orders.RefundRequired + "|" + sp.orderID + "|" + event)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		m.violate("event lost", "order events never published: %v", missing)
	}
}

// tPurchase is a purchase as Redis holds it.
type tPurchase struct {
	pid, user   string
	qty, shard  int
	home        int
	status      seckill.PurchaseStatus
	order       string
	requeues    int
	created     int64
	given, held bool
	// listed: the buyer's entry on its home shard lists the purchase.
	listed bool
}

// truth is what Redis and the ledger hold for the current sale.
type truth struct {
	metas     []map[string]string
	purchases map[string]*tPurchase
	entries   map[string]string
	holds     int64
	queued    map[string]string // job id -> due, inflight or dead
	ledger    map[string]ledgerEntry
}

func (tr truth) reserved() int {
	n := 0
	for _, p := range tr.purchases {
		if p.status == seckill.Reserved {
			n += p.qty
		}
	}
	return n
}

func (tr truth) awaiting() int {
	n := 0
	for _, p := range tr.purchases {
		if p.status == seckill.AwaitingPayment {
			n += p.qty
		}
	}
	return n
}

func (tr truth) describe() string {
	var out []string
	for _, p := range tr.purchases {
		out = append(out, fmt.Sprintf("%s %s q%d s%d %s", p.pid, p.user, p.qty, p.shard, p.status))
	}
	slices.Sort(out)
	return strings.Join(out, "; ") + fmt.Sprintf(" holds %d queued %v", tr.holds, tr.queued)
}

func (m *machine) read() truth {
	tr := truth{purchases: map[string]*tPurchase{}, entries: map[string]string{}, queued: map[string]string{}}
	var err error
	if tr.ledger, err = m.env.b.entries(m.ctx, modelItem, modelMaxShards); err != nil {
		m.t.Fatalf("read the ledger: %v", err)
	}
	if m.sale == nil {
		return tr
	}
	rdb := m.env.b.rdb
	type ref struct {
		user, pid   string
		home, shard int
		qty         int
		given       bool
	}
	var refs []ref
	for n := range m.sale.shards {
		k := delayq.KeysOf("hg:", seckill.QueueName(modelItem), n)
		meta, err := rdb.HGetAll(m.ctx, k.Key("meta")).Result()
		if err != nil {
			m.t.Fatal(err)
		}
		tr.metas = append(tr.metas, meta)
		if meta["version"] != m.sale.version {
			continue // not reset yet by the preheat rolling forward: the earlier sale's
		}
		recs, err := rdb.HGetAll(m.ctx, k.Key("purchases")).Result()
		if err != nil {
			m.t.Fatal(err)
		}
		for pid, rec := range recs {
			f := strings.SplitN(rec, "|", 8)
			if len(f) != 8 {
				m.violate("bad record", "purchase %s: %q", pid, rec)
			}
			qty, _ := strconv.Atoi(f[1])
			created, _ := strconv.ParseInt(f[2], 10, 64)
			home, _ := strconv.Atoi(f[4])
			requeues, _ := strconv.Atoi(f[5])
			order, _, _ := strings.Cut(f[6], "@") // "<order id>@<pay by ms>" once awaiting payment
			tr.purchases[pid] = &tPurchase{pid: pid, user: f[7], qty: qty, shard: n, home: home,
				status: seckill.PurchaseStatus(f[0]), order: order, requeues: requeues, created: created}
		}
		users, err := rdb.HGetAll(m.ctx, k.Key("users")).Result()
		if err != nil {
			m.t.Fatal(err)
		}
		for user, entry := range users {
			tr.entries[user] = entry
			_, list, _ := strings.Cut(entry, "|")
			for it := range strings.SplitSeq(list, ",") {
				pid, rest, ok := strings.Cut(it, "@")
				if !ok {
					continue
				}
				at, q, _ := strings.Cut(rest, ":")
				q, given := strings.CutSuffix(q, "!")
				qty, _ := strconv.Atoi(q)
				shard := -1
				if at != "-" {
					shard, _ = strconv.Atoi(at)
				}
				refs = append(refs, ref{user: user, pid: pid, home: n, shard: shard, qty: qty, given: given})
			}
		}
		holds, err := rdb.ZCard(m.ctx, k.Key("holds")).Result()
		if err != nil {
			m.t.Fatal(err)
		}
		tr.holds += holds
		for set, key := range map[string]string{"due": k.Due, "inflight": k.Inflight, "dead": k.Dead} {
			ids, err := rdb.ZRange(m.ctx, key, 0, -1).Result()
			if err != nil {
				m.t.Fatal(err)
			}
			for _, id := range ids {
				tr.queued[id] = set
			}
		}
	}
	for _, r := range refs {
		p := tr.purchases[r.pid]
		if p == nil && r.shard >= 0 {
			// Made on its buyer's home shard and still reserved: no record.
			p = &tPurchase{pid: r.pid, user: r.user, qty: r.qty, shard: r.shard, home: r.home, status: seckill.Reserved}
			tr.purchases[r.pid] = p
		}
		if p != nil {
			p.given, p.held, p.listed = r.given, r.shard < 0, true
		}
	}
	return tr
}

// check reads Redis and the ledger, checks every invariant and returns
// what it read.
func (m *machine) check() truth {
	m.t.Helper()
	meta0 := m.adopt()
	tr := m.read()
	// What Redis holds, against what the model knows.
	for pid, p := range tr.purchases {
		k := m.known[pid]
		if k == nil {
			k = &mPurchase{pid: pid, user: p.user, qty: p.qty, sale: m.sale.n, status: seckill.Reserved}
			m.known[pid] = k
		}
		if k.status != p.status && k.status != seckill.Reserved &&
			(k.status != seckill.AwaitingPayment || (p.status != seckill.Paid && p.status != seckill.Expired)) {
			m.violate("status went back", "purchase %s went from %s to %s", pid, k.status, p.status)
		}
		switch p.status {
		case seckill.Reserved, seckill.Confirmed, seckill.Released, seckill.AwaitingPayment, seckill.Paid, seckill.Expired:
		default:
			m.violate("bad record", "purchase %s is %q", pid, p.status)
		}
		// A sale with a payment window never confirms; one without never
		// awaits payment.
		ordered := p.status != seckill.Reserved && p.status != seckill.Released
		if m.sale != nil && ordered && (p.status == seckill.Confirmed) == m.sale.window {
			m.violate("bad record", "purchase %s is %s in a sale with payment window %t", pid, p.status, m.sale.window)
		}
		k.status = p.status
	}
	for pid, k := range m.known {
		if m.sale != nil && k.sale == m.sale.n && tr.purchases[pid] == nil {
			m.violate("purchase lost", "purchase %s of %s (%s) is gone from Redis", pid, k.user, k.status)
		}
	}
	if m.sale != nil {
		// Conservation, shard by shard, from the purchase records (a shard
		// not reset yet by the preheat rolling forward holds the earlier
		// sale, frozen: it is counted once reset).
		total, reset := 0, true
		for n, meta := range tr.metas {
			if meta["version"] != m.sale.version {
				reset = false
				continue
			}
			num := func(f string) int {
				v, _ := strconv.Atoi(meta[f])
				return v
			}
			stock, left, confirmed, released := num("stock"), num("left:"+meta["version"]), num("confirmed"), num("released")
			if meta["frozen"] != "" || meta["retired"] != "" {
				left = num("left_aside") // moved aside while a preheat is under way, or once retired
			}
			awaiting, paid, expired := num("awaiting"), num("paid"), num("expired")
			var res, conf, rel, await, pd, exp int
			for _, p := range tr.purchases {
				if p.shard != n {
					continue
				}
				switch p.status {
				case seckill.Reserved:
					res += p.qty
				case seckill.Confirmed:
					conf += p.qty
				case seckill.Released:
					rel += p.qty
				case seckill.AwaitingPayment:
					await += p.qty
				case seckill.Paid:
					pd += p.qty
				case seckill.Expired:
					exp += p.qty
				}
			}
			// sold = paid + awaiting payment + confirmed, never above the stock.
			if left < 0 || stock != left+res+conf+await+pd {
				m.violate("conservation", "shard %d: stock %d != left %d + reserved %d + confirmed %d + awaiting %d + paid %d",
					n, stock, left, res, conf, await, pd)
			}
			if confirmed != conf || released != rel || awaiting != await || paid != pd || expired != exp {
				m.violate("counters", "shard %d: meta confirmed %d released %d awaiting %d paid %d expired %d, records %d %d %d %d %d",
					n, confirmed, released, awaiting, paid, expired, conf, rel, await, pd, exp)
			}
			total += stock
		}
		if reset && total != m.sale.stock {
			m.violate("conservation", "the shards hold %d units, the sale has %d", total, m.sale.stock)
		}
		// The per-user limit, over what is sold (reserved or confirmed).
		per := map[string]int{}
		for _, p := range tr.purchases {
			if p.status != seckill.Released && p.status != seckill.Expired {
				per[p.user] += p.qty
			}
		}
		for u, q := range per {
			if q > m.sale.limit {
				m.violate("per-user limit", "%s holds %d units, limit %d", u, q, m.sale.limit)
			}
		}
	}
	// The ledger: an order only for a purchase never released, at most the
	// stock in orders, at most the limit per user.
	units, perUser := 0, map[string]int{}
	for id, e := range tr.ledger {
		if e.voided {
			continue
		}
		k := m.known[e.purchase]
		if k == nil || seckill.OrderID(e.purchase) != id {
			m.violate("stray order", "order %s (%+v) belongs to no purchase ever admitted", id, e)
		}
		if k.status == seckill.Released {
			m.violate("order for a released purchase", "order %s of %s's released purchase %s", id, k.user, k.pid)
		}
		if e.qty != k.qty || e.user != k.user {
			m.violate("stray order", "order %s is for %d to %s, the purchase %d to %s", id, e.qty, e.user, k.qty, k.user)
		}
		if m.sale != nil && k.sale == m.sale.n && k.status != seckill.Expired { // an expired unit sells again
			units += e.qty
			perUser[e.user] += e.qty
		}
	}
	if m.sale != nil {
		if units > m.sale.stock {
			m.violate("oversold", "%d units ordered, stock %d", units, m.sale.stock)
		}
		for u, q := range perUser {
			if q > m.sale.limit {
				m.violate("per-user limit", "%d units ordered for %s, limit %d", q, u, m.sale.limit)
			}
		}
	}
	for pid, p := range tr.purchases {
		switch p.status {
		case seckill.Reserved, seckill.Released:
			continue
		}
		e, ok := tr.ledger[seckill.OrderID(pid)]
		if !ok || e.voided || p.order != seckill.OrderID(pid) {
			m.violate("confirmed without its order", "purchase %s %s as %q; the ledger holds %+v (%t)", pid, p.status, p.order, e, ok)
		}
		if p.status == seckill.Confirmed {
			continue
		}
		// Paid or expired as the ledger decided, once: no expired order is
		// ever paid, no paid order ever expired.
		o, err := m.orders.inner.FindOrder(m.ctx, seckill.Order{ID: p.order, ItemID: modelItem, Shard: p.shard})
		if err != nil {
			m.t.Fatalf("read order %s: %v", p.order, err)
		}
		if p.status == seckill.Paid && o.End != seckill.EndPaid || p.status == seckill.Expired && o.End != seckill.EndExpired {
			m.violate("purchase against its order", "purchase %s is %s, its order ended %q", pid, p.status, o.End)
		}
	}
	m.observe(tr, meta0)
	m.last = tr
	return tr
}

// abstract hashes the state as the invariants see it: the sale, each
// purchase (buyer, quantity, shard, status, its order, its job, its age) in
// a canonical order, what is parked and what is armed.
func (m *machine) abstract(tr truth) uint64 {
	var sb strings.Builder
	if m.sale != nil {
		fmt.Fprintf(&sb, "sale %d/%d/%d;", m.sale.stock, m.sale.shards, m.sale.limit)
	}
	var ps []string
	now := m.clk.Now()
	for pid, p := range tr.purchases {
		l := "-"
		if e, ok := tr.ledger[seckill.OrderID(pid)]; ok {
			l = "o"
			if e.voided {
				l = "v"
			}
		}
		msgs := 0
		for _, msg := range m.bag {
			if strings.HasPrefix(msg.job.ID, pid+"|") {
				msgs++
			}
		}
		job := ""
		for id, set := range tr.queued {
			if strings.HasPrefix(id, pid+"|") {
				job = set
			}
		}
		old := 0
		if now.Sub(purchaseAt(pid)) > seckill.DefaultReservedTimeout {
			old = 1
		}
		ps = append(ps, fmt.Sprintf("%s q%d s%d h%d %s %s m%d %s r%d o%d g%t", p.user, p.qty, p.shard, p.home, p.status, l,
			min(msgs, 2), job, p.requeues, old, p.given))
	}
	slices.Sort(ps)
	sb.WriteString(strings.Join(ps, ","))
	var parked []string
	for _, g := range m.parked {
		parked = append(parked, strings.Fields(g.why)[0])
	}
	slices.Sort(parked)
	fmt.Fprintf(&sb, ";parked %v;armed %v %d;holds %d", parked, m.orders.pending(), m.env.faults.pending(), tr.holds)
	// Which states a container's cache may still hold though Redis moved on.
	lags := func(at time.Time, ttl time.Duration) bool {
		return !at.IsZero() && now.Sub(at) > 0 && now.Sub(at) < ttl
	}
	fmt.Fprintf(&sb, ";lag %t %t %t", lags(m.seen.soldOut, modelMemory), lags(m.seen.ended, modelMemory),
		lags(m.seen.unknown, modelSettingsTTL))
	// The preheat protocol's and the registry's state: an intent open (its
	// phase), shards frozen or retired, shards polled.
	phase, _ := m.env.b.rdb.HGet(m.ctx, "hg:{sk:"+modelItem+"}:preheat", "phase").Result()
	reg, _ := m.env.b.rdb.HGet(m.ctx, "hg:seckill:items", modelItem).Result()
	reg, _, _ = strings.Cut(strings.TrimPrefix(reg, strconv.Itoa(m.saleShards())+"/"), "/")
	fmt.Fprintf(&sb, ";intent %s;polled %s", phase, reg)
	for _, meta := range tr.metas {
		fmt.Fprintf(&sb, ";f%t r%t", meta["frozen"] != "", meta["retired"] != "")
	}
	h := fnv.New64a()
	h.Write([]byte(sb.String()))
	return h.Sum64()
}

func (m *machine) saleShards() int {
	if m.sale == nil {
		return 0
	}
	return m.sale.shards
}

// purchaseAt is when purchase pid was made: a purchase id is "pu_" and a
// ULID, which starts with its time.
func purchaseAt(pid string) time.Time {
	id, err := ulid.ParseStrict(strings.TrimPrefix(pid, "pu_"))
	if err != nil {
		return time.Time{}
	}
	return ulid.Time(id.Time())
}

// drawAct draws the parameters of an action of kind.
func drawAct(t *rapid.T, kind string) act {
	a := act{Kind: kind}
	switch kind {
	case "pay":
		a.A = rapid.IntRange(0, 7).Draw(t, "purchase")
		a.B = rapid.IntRange(0, payKinds-1).Draw(t, "kind")
		a.On = rapid.IntRange(0, modelContainers-1).Draw(t, "container")
	case "preheat", "preheatPaid":
		// A stock of at least the shard count: a preheat caps its shards
		// at its stock.
		a.A = rapid.IntRange(1, modelMaxShards).Draw(t, "stock")
		a.B = rapid.IntRange(1, modelMaxShards).Draw(t, "shards")
		a.C = rapid.IntRange(1, 2).Draw(t, "limit")
		a.On = rapid.IntRange(0, modelContainers-1).Draw(t, "container")
	case "buy":
		a.A = rapid.IntRange(0, modelUsers-1).Draw(t, "user")
		a.B = rapid.IntRange(1, 2).Draw(t, "quantity")
		a.On = rapid.IntRange(0, modelContainers-1).Draw(t, "container")
	case "poll":
		a.A = rapid.IntRange(0, 1).Draw(t, "ack")
	case "deliver":
		a.A = rapid.IntRange(0, 7).Draw(t, "message")
		a.B = rapid.IntRange(0, 1).Draw(t, "duplicate")
	case "dlq", "release":
		a.A = rapid.IntRange(0, 7).Draw(t, "which")
	case "ledgerFault":
		a.A = rapid.IntRange(0, lfKinds-1).Draw(t, "fault")
	case "redisFault":
		a.A = rapid.IntRange(0, len(modelScripts)-1).Draw(t, "script")
		a.B = rapid.IntRange(0, 1).Draw(t, "delayed")
	case "advance":
		a.A = rapid.IntRange(0, len(modelAdvances)-1).Draw(t, "by")
	}
	return a
}

var modelKinds = []string{"preheat", "preheatPaid", "pay", "buy", "poll", "deliver", "dlq", "ledgerFault", "redisFault", "compensate",
	"advance", "release", "forget"}

// runModel is one rapid run: a first preheat, then rapid's actions, then
// settling.
func (env *modelEnv) runModel(t *rapid.T) {
	env.runs++
	m := newMachine(t, env)
	defer m.stop()
	m.apply(drawAct(t, rapid.SampledFrom([]string{"preheat", "preheatPaid"}).Draw(t, "first")))
	actions := map[string]func(*rapid.T){}
	for _, kind := range modelKinds {
		actions[kind] = func(t *rapid.T) {
			a := drawAct(t, kind)
			switch {
			case (a.Kind == "deliver" || a.Kind == "dlq") && len(m.bag) == 0,
				a.Kind == "release" && len(m.parked) == 0:
				t.Skip("nothing to do")
			case (a.Kind == "ledgerFault" || a.Kind == "redisFault") && len(m.parked) >= modelMaxParked:
				t.Skip("enough parked")
			}
			m.t = t
			m.apply(a)
		}
	}
	t.Repeat(actions)
	m.settle()
}

// replay runs a recorded sequence as a plain test.
func (env *modelEnv) replay(t *testing.T, steps []act) {
	env.runs++
	m := newMachine(t, env)
	defer m.stop()
	for _, a := range steps {
		m.apply(a)
	}
	m.settle()
}

func newModelEnvs(t *testing.T) []*modelEnv {
	t.Helper()
	srv := redistest.Start(t)
	var envs []*modelEnv
	for _, name := range []string{"redis", "dynamodb"} {
		rdb := srv.Client(t)
		faults := newScriptFaults(t)
		rdb.AddHook(faults)
		var b orderBackend
		if name == "redis" {
			b = redisOrderBackend("redis", rdb)
		} else {
			b = dynamoOrderBackend(t, rdb, dynalitetest.Start(t))
		}
		envs = append(envs, &modelEnv{b: b, faults: faults, states: map[uint64]bool{}, kinds: map[string]int{}})
	}
	return envs
}

func (env *modelEnv) summary(t *testing.T) {
	kinds := make([]string, 0, len(env.kinds))
	for k, n := range env.kinds {
		kinds = append(kinds, fmt.Sprintf("%s (%d)", k, n))
	}
	slices.Sort(kinds)
	line := fmt.Sprintf("model flash-sale/%s: runs %d, steps %d, distinct states %d, violations %d%s",
		env.b.name, env.runs, env.steps, len(env.states), len(env.kinds), strings.Join(append([]string{""}, kinds...), "; "))
	if env.firstAt > 0 {
		line += fmt.Sprintf(" (first found in run %d; the runs after it shrank it)", env.firstAt)
	}
	t.Log(line)
	fmt.Println(line)
}

// modelRuns is how many runs rapid makes per backend: MODEL_RUNS, or a
// count that keeps make test quick.
func modelRuns(t *testing.T, dflt int) int {
	if s := os.Getenv("MODEL_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("MODEL_RUNS=%q: a positive count, please", s)
		}
		return n
	}
	return dflt
}

// withRapidFlags sets rapid's run and step counts for fn.
func withRapidFlags(t *testing.T, checks, steps int, fn func()) {
	t.Helper()
	for name, v := range map[string]int{"rapid.checks": checks, "rapid.steps": steps} {
		old := flag.Lookup(name).Value.String()
		if err := flag.Set(name, strconv.Itoa(v)); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = flag.Set(name, old) }()
	}
	fn()
}

func TestFlashSaleModel(t *testing.T) {
	for _, env := range newModelEnvs(t) {
		t.Run(env.b.name, func(t *testing.T) {
			defer env.summary(t)
			// Three containers' steps cost more: fewer runs keep make
			// test's cost where it was (200 and 50 with one container).
			runs := modelRuns(t, map[string]int{"redis": 150, "dynamodb": 38}[env.b.name])
			withRapidFlags(t, runs, 40, func() { rapid.Check(t, env.runModel) })
		})
	}
}

// modelRegressions are sequences the model found (shrunk by rapid, then by
// hand), on the code or in the model itself, kept so that they stay fixed.
// A step is {kind, A, B, C, container}.
var modelRegressions = map[string][]act{
	// Issue 15: an order awaiting payment whose expiry job was dead-lettered
	// (here after the AWS poller acked it) never expired: the compensation
	// pass now queues it again.
	"expiry job dead-lettered": {{"preheatPaid", 1, 1, 1, 0}, {"preheatPaid", 2, 2, 2, 0}, {"buy", 0, 1, 0, 0},
		{"buy", 0, 1, 0, 0}, {"poll", 0, 0, 0, 0}, {"dlq", 5, 0, 0, 0}, {"deliver", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"pay", 5, 0, 0, 0}, {"advance", 2, 0, 0, 0}, {"ledgerFault", 0, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"advance", 3, 0, 0, 0}, {"advance", 4, 0, 0, 0}, {"ledgerFault", 2, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"preheat", 1, 3, 1, 0}, {"preheat", 3, 1, 2, 0}, {"poll", 1, 0, 0, 0},
		{"pay", 6, 3, 0, 0}, {"pay", 0, 3, 0, 0}, {"advance", 0, 0, 0, 0}, {"dlq", 0, 0, 0, 0},
		{"redisFault", 1, 1, 0, 0}, {"buy", 2, 2, 0, 0}, {"dlq", 3, 0, 0, 0}},
	// The order write landed but its answer was lost; the redelivery's write
	// was refused for good, and the consumer released a purchase whose
	// order exists.
	"refused after a lost answer": {{"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 0}, {"ledgerFault", lfLost, 0, 0, 0},
		{"poll", 0, 0, 0, 0}, {"deliver", 0, 0, 0, 0}, {"ledgerFault", lfRefused, 0, 0, 0}, {"deliver", 0, 0, 0, 0}},
	// Issue 13 item 3, AWS wiring: the job left Redis for SQS, the order
	// write landed but its answer is late; compensation took "not in Redis"
	// for lost and, after its re-enqueues, released the ordered purchase.
	"late answer, AWS ack": {{"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 0}, {"poll", 1, 0, 0, 0},
		{"ledgerFault", lfLate, 0, 0, 0}, {"deliver", 0, 0, 0, 0}, {"advance", 4, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"release", 0, 0, 0, 0}},
	// The same with the answer lost: the redelivery then finds the
	// purchase released, though its order exists.
	"lost answer, AWS ack": {{"preheat", 1, 1, 1, 0}, {"ledgerFault", lfLost, 0, 0, 0}, {"buy", 0, 1, 0, 0},
		{"advance", 4, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"deliver", 0, 0, 0, 0},
		{"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}},
	// Issue 13 item 3 as filed: the write is slow; the purchase is released,
	// the unit sells to u1, then the first write lands: two orders, stock 1.
	"slow write, sold twice": {{"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 0}, {"poll", 1, 0, 0, 0},
		{"ledgerFault", lfSlow, 0, 0, 0}, {"deliver", 0, 0, 0, 0}, {"advance", 4, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 1, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"buy", 1, 1, 0, 0},
		{"poll", 1, 0, 0, 0}, {"deliver", 4, 0, 0, 0}, {"release", 0, 0, 0, 0}},
	// repair.lua's reply was lost as it released a purchase; go-redis ran
	// it again, which found the purchase released and answered "nothing to
	// do", so the buyer's limit was never given back.
	"retried release": {{"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 0}, {"advance", 4, 0, 0, 0}, {"poll", 0, 0, 0, 0},
		{"dlq", 0, 0, 0, 0}, {"compensate", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0}, {"dlq", 0, 0, 0, 0},
		{"compensate", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0}, {"dlq", 0, 0, 0, 0}, {"compensate", 0, 0, 0, 0},
		{"poll", 0, 0, 0, 0}, {"dlq", 0, 0, 0, 0}, {"redisFault", 2, 0, 0, 0}, {"compensate", 0, 0, 0, 0}},
	// Found with the fix in place: admit.lua's reply was lost; before
	// go-redis ran it again, the purchase was ordered and the item preheated
	// again. The retry answered "another version", and the service admitted
	// the same purchase id again in the new sale, where its order id named
	// the old sale's order.
	"admission retried across a preheat": {{"preheat", 1, 1, 1, 0}, {"redisFault", 0, 1, 0, 0}, {"buy", 0, 1, 0, 0},
		{"poll", 0, 0, 0, 0}, {"deliver", 0, 0, 0, 0}, {"preheat", 1, 1, 1, 0}, {"release", 0, 0, 0, 0}},
	// Issue 21, found by the model with several containers: a re-preheat
	// from 1 shard to 3 stalled between its resets (reset.lua's reply lost,
	// its retry late) after its commit: shard 0 reset, shards 1 and 2, new,
	// frozen with no sale yet. A purchase whose buyer's home is shard 1 was
	// answered 404 "no such item" (admit.lua took the shard without a
	// version for an unknown item before it looked for the freeze), and the
	// container forgot what it knew of the item. It is ErrPreheating now
	// (take.lua the same).
	"purchase on a shard a stalled preheat adds": {{"preheat", 1, 1, 1, 0}, {"redisFault", 2, 1, 0, 0},
		{"advance", 0, 0, 0, 0}, {"preheatPaid", 3, 4, 1, 2}, {"buy", 0, 1, 0, 0}},
	// The same, found first: the re-preheat's intent opened late (its reply
	// lost, its retry after 2 min), then it stalled in its resets.
	"purchase on a shard a stalled preheat adds, begun late": {{"preheat", 1, 1, 1, 0}, {"redisFault", 2, 1, 0, 0},
		{"buy", 0, 1, 0, 1}, {"redisFault", 10, 1, 0, 0}, {"poll", 1, 0, 0, 0}, {"deliver", 4, 0, 0, 0},
		{"preheatPaid", 3, 3, 1, 1}, {"advance", 3, 0, 0, 0}, {"release", 0, 0, 0, 0}, {"buy", 0, 1, 0, 1}},
	// Found by the model with several containers: container 1 read the
	// settings of a sale of 3 shards; container 2 preheated again with 2
	// (shard 2 dropped); within the settings' TTL, container 1 sent u2 (home
	// shard 2 of 3) to the dropped shard, which answered "unknown item",
	// and the purchase was refused 404 "no such item" while the item was
	// on sale (and the container forgot what it knew of it). Unknown from a
	// copy of the settings is now checked against fresh ones, like another
	// version.
	"purchase under settings from before a preheat with fewer shards": {{"preheat", 1, 1, 1, 0},
		{"forget", 0, 0, 0, 0}, {"preheat", 3, 4, 1, 1}, {"buy", 2, 2, 0, 1}, {"preheatPaid", 3, 2, 1, 2},
		{"buy", 2, 2, 0, 1}},
	// Found by the model's new refusal check, shrunk by hand: container 1
	// admitted u0 in the first sale; a preheat through container 0 started
	// another, which sold out; container 1, remembering it sold out,
	// answered u0 409 "already purchased" though u0 bought nothing in it:
	// its list of buyers outlived the sale it remembered. Buyers are now
	// remembered per sale (version).
	"buyer of the sale before": {{"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 1}, {"poll", 1, 0, 0, 0},
		{"deliver", 0, 0, 0, 0}, {"preheat", 1, 1, 1, 0}, {"advance", 0, 0, 0, 0}, {"buy", 1, 1, 0, 1},
		{"buy", 2, 1, 0, 1}, {"buy", 0, 1, 0, 1}},
	// A model error, found when the model began to arm two script faults
	// more often: a preheat stalled in its freeze, a purchase stalled
	// behind it; settling, the preheat answered done, but the model
	// adopted a sale only for a preheat that answered an error (expected
	// took nil for one), so the purchase answered next counted in the sale
	// before, which the preheat seemed to have dropped.
	"purchase answered after a stalled preheat": {{"preheat", 1, 1, 1, 0}, {"redisFault", 8, 1, 0, 0},
		{"redisFault", 0, 1, 0, 0}, {"preheat", 2, 1, 2, 0}, {"buy", 0, 1, 0, 0}},
	// Model errors, found once a preheat's done was judged: a preheat
	// stalled in closing its intent (preheat_end.lua's reply lost, retried
	// late) after its shards were reset; the model adopted its sale, a
	// purchase was admitted in it, then the preheat answered done, and the
	// model took that purchase for one of the sale before, dropped.
	"purchase admitted before its preheat answered": {{"preheat", 1, 1, 1, 0}, {"advance", 0, 0, 0, 0},
		{"advance", 0, 0, 0, 0}, {"advance", 0, 0, 0, 0}, {"advance", 0, 0, 0, 0}, {"buy", 0, 2, 0, 0},
		{"poll", 1, 0, 0, 0}, {"redisFault", 12, 1, 0, 0}, {"forget", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0},
		{"pay", 2, 0, 0, 1}, {"preheatPaid", 1, 2, 1, 2}, {"buy", 1, 1, 0, 1}, {"release", 7, 0, 0, 0}},
	// The same stall, then another preheat (its intent closed, the item
	// is free): the first answered done once the second's sale was on.
	// (Model errors, the three above.)
	"preheat answered after the next one": {{"preheat", 1, 1, 1, 0}, {"advance", 0, 0, 0, 0},
		{"advance", 0, 0, 0, 0}, {"forget", 0, 0, 0, 0}, {"redisFault", 12, 1, 0, 0}, {"poll", 0, 0, 0, 0},
		{"preheat", 3, 2, 1, 0}, {"preheat", 2, 1, 1, 0}},
	// A model error: a preheat stalled in its commit past its deadline;
	// the next preheat rolled it forward, froze its shards and committed,
	// then stalled in registering. The model, seeing the first one's sale
	// for the first time with the next one's intent open, took the shards
	// frozen by it for a preheat half applied.
	"sale seen first frozen by the next preheat": {{"preheat", 1, 1, 1, 0}, {"advance", 0, 0, 0, 0},
		{"advance", 0, 0, 0, 0}, {"advance", 0, 0, 0, 0}, {"advance", 0, 0, 0, 0}, {"advance", 1, 0, 0, 0},
		{"buy", 2, 1, 0, 1}, {"redisFault", 13, 0, 0, 0}, {"redisFault", 11, 1, 0, 0}, {"redisFault", 14, 1, 0, 0},
		{"ledgerFault", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0}, {"deliver", 1, 1, 0, 0}, {"deliver", 0, 0, 0, 0},
		{"forget", 0, 0, 0, 0}, {"redisFault", 13, 1, 0, 0}, {"forget", 0, 0, 0, 0}, {"preheat", 3, 2, 1, 2},
		{"advance", 1, 0, 0, 0}, {"preheatPaid", 3, 1, 1, 2}},
	// Found by the model: a preheat of 1 shard stalled in opening its
	// intent (preheat_begin.lua's reply lost, its resend 61 s late); past
	// its deadline the next preheat (3 shards) rolled it back and ran; u0
	// bought on shard 1 or 2 of the new sale. Then the resend opened a
	// fresh intent (the one before was closed), with the first preheat's
	// stale view: touching 1 shard. It froze and reset shard 0 alone and
	// registered 1 shard: the new sale's shards 1 and 2, u0's reserved
	// purchase with them, were dropped from the sale. A begin is now
	// refused once a preheat began at or after its deadline
	// (ErrPreheatAbandoned).
	"resent begin after its preheat was rolled back": {{"preheat", 1, 1, 1, 0}, {"advance", 0, 0, 0, 0},
		{"advance", 0, 0, 0, 0}, {"advance", 0, 0, 0, 0}, {"redisFault", 10, 1, 0, 0}, {"preheat", 4, 1, 2, 1},
		{"advance", 2, 0, 0, 0}, {"preheat", 3, 4, 1, 1}, {"buy", 0, 1, 0, 2}, {"release", 4, 0, 0, 0}},
	// Found by the model in the same run, not shrunk far: a preheat
	// answered orders_pending while the model knew no purchase of the sale
	// waiting for its order or payment. It too has a begin resent late,
	// and passed with the fix above; traced, it is a model error (next).
	"orders pending, none known": {{"preheat", 3, 1, 1, 2}, {"preheat", 4, 2, 2, 2}, {"buy", 3, 2, 0, 1},
		{"redisFault", 10, 1, 0, 0}, {"redisFault", 2, 1, 0, 0}, {"buy", 1, 2, 0, 0}, {"poll", 0, 0, 0, 0},
		{"deliver", 0, 0, 0, 0}, {"deliver", 2, 0, 0, 0}, {"preheat", 2, 2, 1, 1}, {"poll", 1, 0, 0, 0},
		{"ledgerFault", 4, 0, 0, 0}, {"pay", 1, 2, 0, 2}, {"deliver", 6, 0, 0, 0}, {"forget", 0, 0, 0, 0},
		{"preheatPaid", 4, 2, 2, 2}, {"ledgerFault", 1, 0, 0, 0}, {"buy", 0, 1, 0, 1}, {"ledgerFault", 5, 0, 0, 0},
		{"ledgerFault", 5, 0, 0, 0}, {"forget", 0, 0, 0, 0}, {"poll", 0, 0, 0, 0}, {"release", 2, 0, 0, 0},
		{"redisFault", 12, 1, 0, 0}, {"deliver", 5, 0, 0, 0}, {"pay", 1, 2, 0, 1}, {"advance", 3, 0, 0, 0},
		{"deliver", 1, 1, 0, 0}, {"deliver", 1, 0, 0, 0}, {"release", 4, 0, 0, 0}, {"poll", 1, 0, 0, 0},
		{"deliver", 1, 1, 0, 0}},
	// A model error, traced from the case above and shrunk: a preheat's
	// begin stalls (reply lost, resent within its deadline); u0 buys; the
	// resend freezes, finds u0's purchase waiting for its order, aborts
	// and stalls in preheat_end; the order is made and confirmed; then the
	// preheat answers orders_pending, which the model judged against what
	// it knew then (nothing waiting). It is judged now against every step
	// the preheat spanned. Failed on both order ledgers before.
	// Found by MODEL_RUNS=10000 (Redis orders, 2026-12-03): a preheat of
	// 1 shard committed and reset, then stalled in closing its intent
	// (unindex.lua's reply lost, resent late); the next preheat (2 shards)
	// registered and froze, and stalled in its first reset. The first
	// then answered by reading the item back: registered as 2 shards,
	// shard 1 without a sale yet, so "no such item" (404) to a preheat
	// that had succeeded. Preheat now answers the sale it set up, and a
	// read while another preheat is half applied answers "being
	// preheated" (503, retry), not 404.
	"preheat read back during the next": {{"preheat", 1, 1, 1, 0}, {"redisFault", 2, 0, 0, 0}, {"redisFault", 2, 1, 0, 0},
		{"redisFault", 17, 1, 0, 0}, {"preheat", 1, 1, 1, 0}, {"preheat", 2, 2, 1, 0}, {"release", 0, 0, 0, 0}},
	// Found by make test's default runs (CI, 2026-12-03): u3's purchase
	// held its limit at home (1 left, 2 asked) and its take on shard 0 met
	// a preheat's freeze (take.lua's reply lost, resent later); the
	// preheat (1 shard) then committed and reset shard 0 under a new
	// version, and the resent take answered "the item changed", which the
	// service answered "sold out" (410), though the new sale had stock.
	// It answers "being preheated" (503, retry) now. The model also judged
	// that refusal as if it had seen no other call's change: the drain at
	// the end of a run let the preheat go first without a step.
	"sold out never shown": {{"preheat", 1, 1, 1, 0}, {"compensate", 0, 0, 0, 0}, {"redisFault", 6, 1, 0, 0},
		{"redisFault", 0, 1, 0, 0}, {"preheat", 2, 3, 2, 2}, {"redisFault", 8, 1, 0, 0}, {"preheat", 1, 2, 1, 0},
		{"buy", 1, 2, 0, 2}, {"buy", 3, 2, 0, 1}},
	"orders pending seen before the answer": {{"preheat", 1, 1, 1, 0}, {"redisFault", 10, 1, 0, 0},
		{"redisFault", 12, 1, 0, 0}, {"preheat", 1, 1, 1, 0}, {"buy", 0, 1, 0, 0}, {"release", 0, 0, 0, 0},
		{"poll", 0, 0, 0, 0}, {"deliver", 0, 0, 0, 0}},
	// Found by MODEL_RUNS=5000 on the DynamoDB orders (run 261 of 567,
	// 2026-12-03): an item forgotten past its retention is preheated again;
	// the preheat registers, then stalls before resetting its shards (here
	// its register's reply is lost and retried later). A compensation pass
	// in that window read the shards as retired and past their end, and
	// removed the entry the preheat had just written; the sale went on
	// unregistered, and its order job waited in a queue nobody polled.
	// retire.lua now answers "not retired" for a shard a preheat has frozen.
	"forgotten item preheated again, trimmed before its reset": {{"preheat", 3, 4, 1, 2}, {"forget", 0, 0, 0, 0},
		{"redisFault", 13, 1, 0, 0}, {"redisFault", 16, 1, 0, 0}, {"preheatPaid", 2, 2, 2, 2},
		{"compensate", 0, 0, 0, 0}, {"release", 6, 0, 0, 0}, {"buy", 0, 1, 0, 1}},
}

// modelOpen are the recorded cases of defects not fixed yet, skipped with
// the defect's name until they are.
var modelOpen = map[string]string{}

func TestFlashSaleModelRegressions(t *testing.T) {
	for _, env := range newModelEnvs(t) {
		t.Run(env.b.name, func(t *testing.T) {
			for name, steps := range modelRegressions {
				t.Run(name, func(t *testing.T) {
					if defect, open := modelOpen[name]; open && os.Getenv("MODEL_OPEN") == "" {
						t.Skipf("open defect (MODEL_OPEN=1 runs it): %s", defect)
					}
					env.replay(t, steps)
				})
			}
		})
	}
}
