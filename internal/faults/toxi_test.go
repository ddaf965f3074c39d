package faults_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/internal/history"
	"github.com/hourglass/hourglass/internal/redistest"
	"github.com/hourglass/hourglass/internal/toxitest"
)

// toxiRun is a serveRun whose Redis and payout provider sit behind an
// in-process toxiproxy: `hourglass serve` (API, poller and consumer) reaches
// both only through it, while the test reads Redis and the provider's truth
// directly.
type toxiRun struct {
	*serveRun
	tp *toxitest.Server
	// redisPx is between serve and redis-server; payoutPx between the
	// consumer and the fake provider.
	redisPx, payoutPx *toxitest.Proxy
}

func newToxiRun(t *testing.T, name string, extra map[string]string) *toxiRun {
	t.Helper()
	redis := redistest.Start(t)
	r := newServeRun(t, name, redis, extra)
	tp := toxitest.Start(t)
	rp := tp.Proxy("redis", redis.Addr())
	pp := tp.Proxy("provider", strings.TrimPrefix(r.provider.URL, "http://"))
	r.env["REDIS_URL"] = rp.URL("redis")
	r.env["PAYOUT_URL"] = pp.URL("http")
	return &toxiRun{serveRun: r, tp: tp, redisPx: rp, payoutPx: pp}
}

// phase is one stretch of a fault run: toxics on one proxy for a while (or
// the proxy down), then a healed stretch before the next.
type phase struct {
	name   string
	proxy  *toxitest.Proxy
	toxics []toxitest.Toxic
	// down takes the proxy down instead: connections refused.
	down bool
	// every, if set, redraws the toxics that often (toxitest's Redraw),
	// so a toxicity below 1 keeps picking connections.
	every    time.Duration
	on, heal time.Duration
	// begin and end, if set, run as the toxics go on and come off.
	begin, end func()
}

// probe counts something the faults should move (connections Redis
// accepted, calls the provider got), so that each phase shows it bit.
type probe struct {
	what  string
	count func() int64
}

// runPhases runs phases one after the other while a load runs, and logs
// each phase's probe count.
func runPhases(t *testing.T, began time.Time, pr probe, phases []phase) {
	t.Helper()
	ctx := context.Background()
	for _, p := range phases {
		at := time.Since(began).Round(100 * time.Millisecond)
		var before int64
		if pr.count != nil {
			before = pr.count()
		}
		if p.begin != nil {
			p.begin()
		}
		switch {
		case p.down:
			p.proxy.Disable(ctx, p.on)
		case p.every > 0:
			p.proxy.Redraw(ctx, p.on, p.every, p.toxics...)
		case len(p.toxics) > 0:
			p.proxy.For(ctx, p.on, p.toxics...)
		default:
			time.Sleep(p.on)
		}
		if p.end != nil {
			p.end()
		}
		time.Sleep(p.heal)
		if pr.count != nil {
			t.Logf("phase %q at %s: %d %s", p.name, at, pr.count()-before, pr.what)
		} else {
			t.Logf("phase %q at %s", p.name, at)
		}
	}
}

// redisConnections counts the connections a redis-server accepted: each
// connection a toxic cut is replaced by a new one.
func redisConnections(t *testing.T, srv *redistest.Server) probe {
	rdb := srv.Client(t)
	return probe{what: "connections accepted by redis", count: func() int64 {
		info, err := rdb.Info(context.Background(), "stats").Result()
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}}
}

// counts is the one line every toxiproxy run prints, whatever it loads.
type counts struct {
	requests, acked, unknown        int
	paid, failed, cancelled         int
	lost, duplicated, paidButFailed int
	// oversold is -1 where the run sells nothing.
	oversold int
}

func (c counts) String() string {
	over := "n/a"
	if c.oversold >= 0 {
		over = fmt.Sprint(c.oversold)
	}
	return fmt.Sprintf("requests=%d acked=%d unknown=%d paid=%d failed=%d cancelled=%d | lost=%d duplicated_payouts=%d paid_but_failed=%d oversold=%s",
		c.requests, c.acked, c.unknown, c.paid, c.failed, c.cancelled, c.lost, c.duplicated, c.paidButFailed, over)
}

func withdrawalCounts(r history.Report) counts {
	return counts{requests: r.Requests, acked: r.Acknowledged, unknown: r.Unknown, paid: r.Paid, failed: r.Failed,
		cancelled: r.Cancelled, lost: r.Lost, duplicated: r.Duplicated, paidButFailed: r.PaidButFailed, oversold: -1}
}

// report prints a run's counts and the toxics it applied, and fails the run
// on anything lost, paid twice, paid but failed, or oversold. (The history
// checker, where it judged the run, fails it on its other violations too.)
func report(t *testing.T, name string, tp *toxitest.Server, c counts) {
	t.Helper()
	t.Logf("%s: counts: %s", name, c)
	for _, a := range tp.Applied() {
		t.Logf("%s: toxic %s", name, a)
	}
	if c.lost > 0 || c.duplicated > 0 || c.paidButFailed > 0 || c.oversold > 0 {
		t.Errorf("%s: lost %d, duplicated payouts %d, paid-but-failed %d, oversold %d: all must be 0",
			name, c.lost, c.duplicated, c.paidButFailed, max(c.oversold, 0))
	}
}

// TestFaultToxiRedis runs the withdrawal load on `hourglass serve` while the
// network between it and Redis misbehaves: replies later than the client's
// 1 s read timeout (the command applied, the client gone), connections cut
// in the middle of a reply, connections reset as a reply starts, and Redis
// blackholed for 10 s (nothing goes through, nothing is refused). go-redis
// retries a command once after a network error, so each of the first three
// also re-runs commands that had been applied: every script must be safe
// under that.
func TestFaultToxiRedis(t *testing.T) {
	faultRun(t)
	r := newToxiRun(t, "toxiproxy redis", nil)
	r.provider.Slow(10 * time.Millisecond)
	r.start()

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	rx := r.redisPx
	runPhases(t, began, redisConnections(t, r.redis), []phase{
		{name: "clean", on: 2 * time.Second},
		{name: "replies past the read timeout", proxy: rx, on: 4 * time.Second, heal: 2 * time.Second,
			toxics: []toxitest.Toxic{toxitest.Latency(toxitest.Downstream, 1500*time.Millisecond, 300*time.Millisecond)}},
		{name: "connections cut mid-reply", proxy: rx, on: 5 * time.Second, heal: 2 * time.Second,
			toxics: []toxitest.Toxic{toxitest.LimitData(toxitest.Downstream, 512)}},
		{name: "connections reset on a reply", proxy: rx, on: 3 * time.Second, heal: 2 * time.Second, every: 250 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.ResetPeer(toxitest.Downstream, 0).On(0.3)}},
		{name: "redis blackholed", proxy: rx, on: 10 * time.Second, heal: 3 * time.Second,
			toxics: []toxitest.Toxic{toxitest.Blackhole(toxitest.Upstream), toxitest.Blackhole(toxitest.Downstream)}},
	})
	stop()
	<-loaded
	finals := r.settle(120 * time.Second)
	rep := r.check(finals, history.Options{MaxAttempts: 8, LateAfter: 1500 * time.Millisecond})
	report(t, r.name, r.tp, withdrawalCounts(rep))
	t.Logf("%s: run took %s", r.name, time.Since(began).Round(100*time.Millisecond))
}

// stallRetries is how many calls after the one that stalled the provider
// answers 503 under the same key: more than the runs' MaxAttempts, so a
// record that forgot the unanswered call would use its attempts up.
const stallRetries = 6

// stall is a provider that stalls after reading the request: while on, it
// pays every call and a blackhole on the way back eats its answer; the next
// stallRetries calls under a key that stalled answer 503.
type stall struct {
	on       atomic.Bool
	mu       sync.Mutex
	stalled  map[string]int    // key -> the call that stalled
	users    map[string]string // key -> the withdrawal's user
	after5xx atomic.Int64
}

func newStall() *stall { return &stall{stalled: map[string]int{}, users: map[string]string{}} }

// rule is the provider's fakes.Rule.
func (s *stall) rule(key string, p fakes.Payout, n int) (int, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.on.Load() {
		if _, ok := s.stalled[key]; !ok {
			s.stalled[key] = n
			s.users[key] = p.UserID
		}
		return http.StatusOK, 0 // paid; the blackhole eats the answer
	}
	if first, ok := s.stalled[key]; ok && n <= first+stallRetries {
		s.after5xx.Add(1)
		return http.StatusServiceUnavailable, 0
	}
	return http.StatusOK, 0
}

// phase is the stall on px for on, then heal.
func (s *stall) phase(px *toxitest.Proxy, on, heal time.Duration) phase {
	return phase{name: "provider stalls after reading, then 503s", proxy: px, on: on, heal: heal,
		toxics: []toxitest.Toxic{toxitest.Blackhole(toxitest.Downstream)},
		begin:  func() { s.on.Store(true) }, end: func() { s.on.Store(false) }}
}

func (s *stall) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d keys stalled (paid, unanswered), then %d answers 503 under them", len(s.stalled), s.after5xx.Load())
}

// ended says how the withdrawals that stalled ended in the ledger.
func (s *stall) ended(finals []history.Final) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[string]int{}
	for _, f := range finals {
		if _, ok := s.stalled[f.ID]; ok {
			by[f.Status]++
		}
	}
	var parts []string
	for _, st := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%d %s", by[st], st))
	}
	return "the stalled ended " + strings.Join(parts, ", ")
}

func (s *stall) keys() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.stalled)
}

// cancelSome asks, as its user, to cancel every every-th withdrawal that
// stalled, while the provider answers its calls 503: each may have been
// paid, so none may be cancelled. It returns how many cancels were answered
// 200.
func (s *stall) cancelSome(l *load, every int) int {
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.stalled))
	users := maps.Clone(s.users)
	s.mu.Unlock()
	ok := 0
	for i, id := range ids {
		if i%every != 0 {
			continue
		}
		if l.cancelOne(users[id], id) == http.StatusOK {
			ok++
		}
	}
	return ok
}

// TestFaultToxiProvider runs the withdrawal load on `hourglass serve` while
// the network between the consumer and the payout provider misbehaves:
// answers later than PAYOUT_TIMEOUT, answers cut in the middle, connections
// reset as the answer starts, and a provider that stalls after reading the
// request: it pays, its answer never arrives, and its next calls under that
// key answer 503 for a while. Each of these pays at the provider without the
// consumer knowing; none may end failed or cancelled.
func TestFaultToxiProvider(t *testing.T) {
	faultRun(t)
	r := newToxiRun(t, "toxiproxy provider", map[string]string{
		"PAYOUT_TIMEOUT": "300ms", "HOURGLASS_RETRY_BASE": "50ms", "HOURGLASS_RETRY_CAP": "200ms", "HOURGLASS_MAX_ATTEMPTS": "4",
	})
	st := newStall()
	r.provider.Decide(refuseRejects(st.rule))
	r.start()
	// As the stall ends, cancel a third of the withdrawals it left unanswered.
	stallPhase := st.phase(r.payoutPx, 2500*time.Millisecond, 3*time.Second)
	var cancelled atomic.Int64
	stallEnd := stallPhase.end
	stallPhase.end = func() { stallEnd(); cancelled.Store(int64(st.cancelSome(r.load, 3))) }

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	px := r.payoutPx
	calls := probe{what: "payout calls", count: func() int64 { return int64(r.provider.TotalCalls()) }}
	runPhases(t, began, calls, []phase{
		{name: "clean", on: 1500 * time.Millisecond},
		{name: "answers past PAYOUT_TIMEOUT", proxy: px, on: 3 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.Latency(toxitest.Downstream, 600*time.Millisecond, 100*time.Millisecond)}},
		{name: "answers cut mid-header", proxy: px, on: 3 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.LimitData(toxitest.Downstream, 40)}},
		{name: "connections reset on the answer", proxy: px, on: 2 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.ResetPeer(toxitest.Downstream, 0)}},
		stallPhase,
	})
	stop()
	<-loaded
	finals := r.settle(90 * time.Second)
	rep := r.check(finals, history.Options{MaxAttempts: 4, LateAfter: 1500 * time.Millisecond})
	report(t, r.name, r.tp, withdrawalCounts(rep))
	t.Logf("%s: %s; a third of them cancelled as the stall ended: %d answered 200; %s; %d lookups; run took %s", r.name, st,
		cancelled.Load(), st.ended(finals), r.provider.Lookups(), time.Since(began).Round(100*time.Millisecond))
	if st.keys() == 0 || rep.SameKeyAfterPaid == 0 {
		t.Errorf("%s: %d keys stalled, %d calls after a payout: the faults did not bite", r.name, st.keys(), rep.SameKeyAfterPaid)
	}
}

// TestFaultToxiLambda runs the withdrawal load on the AWS wiring (enqueue
// handler, overlapping pollers, SQS, consumer handlers) with toxiproxy in
// front of Redis and of the provider: Redis replies cut mid-reply and late,
// provider answers late, Redis blackholed for 10 s, and the provider stalling
// after reading.
func TestFaultToxiLambda(t *testing.T) {
	faultRun(t)
	redis := redistest.Start(t)
	tp := toxitest.Start(t)
	rx := tp.Proxy("redis", redis.Addr())
	var px *toxitest.Proxy
	r := newAWSRun(t, "toxiproxy lambda", awsOptions{
		env: map[string]string{"REDIS_URL": rx.URL("redis"), "PAYOUT_TIMEOUT": "300ms", "HOURGLASS_MAX_ATTEMPTS": "4"},
		payoutURL: func(u string) string {
			px = tp.Proxy("provider", strings.TrimPrefix(u, "http://"))
			return px.URL("http")
		},
	})
	st := newStall()
	r.provider.Decide(refuseRejects(st.rule))

	began := time.Now()
	ctx, stop := context.WithCancel(context.Background())
	loaded := make(chan struct{})
	go func() { r.run(ctx); close(loaded) }()
	runPhases(t, began, redisConnections(t, redis), []phase{
		{name: "clean", on: 1500 * time.Millisecond},
		{name: "redis connections cut mid-reply", proxy: rx, on: 4 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.LimitData(toxitest.Downstream, 512)}},
		{name: "redis replies past the read timeout", proxy: rx, on: 3 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.Latency(toxitest.Downstream, 1500*time.Millisecond, 300*time.Millisecond)}},
		{name: "provider answers past PAYOUT_TIMEOUT", proxy: px, on: 3 * time.Second, heal: 1500 * time.Millisecond,
			toxics: []toxitest.Toxic{toxitest.Latency(toxitest.Downstream, 600*time.Millisecond, 100*time.Millisecond)}},
		{name: "redis blackholed", proxy: rx, on: 10 * time.Second, heal: 2 * time.Second,
			toxics: []toxitest.Toxic{toxitest.Blackhole(toxitest.Upstream), toxitest.Blackhole(toxitest.Downstream)}},
		st.phase(px, 2500*time.Millisecond, 2*time.Second),
	})
	stop()
	<-loaded
	finals := r.settle(120 * time.Second)
	r.shutdown()
	rep := r.check(finals, history.Options{MaxAttempts: 4, LateAfter: 2 * time.Second})
	report(t, r.name, tp, withdrawalCounts(rep))
	t.Logf("%s: %s; %s; %d lookups; %d redeliveries; run took %s", r.name, st, st.ended(finals), r.provider.Lookups(),
		r.source.Redelivered.Load(), time.Since(began).Round(100*time.Millisecond))
	if st.keys() == 0 {
		t.Errorf("%s: no payout stalled: the faults did not bite", r.name)
	}
}
