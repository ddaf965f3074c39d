// Package poller moves due jobs from the delay queues to the work queue.
//
// Each round claims due jobs from every shard under a lease, hands them to the
// dispatcher, acks what it accepted and re-schedules what it refused. A job
// whose lease runs out (its poller died between claim and ack) is returned to
// the due set by the next claim on its shard. Between rounds the poller sleeps
// until the next due time, capped by the poll interval, so short delays are
// kept precisely; concurrent pollers are safe because every claim is atomic.
package poller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"golang.org/x/sync/errgroup"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/metrics"
)

// Dispatcher hands jobs on to the work queue. It returns the jobs that were
// NOT accepted (the poller re-schedules them); every other job was accepted.
// err, if not nil, describes what went wrong (for logs); refused is
// authoritative either way.
type Dispatcher interface {
	Dispatch(ctx context.Context, jobs []delayq.Job) (refused []delayq.Job, err error)
}

// Source lists the queues to poll; it is asked once per round, so queues
// registered meanwhile (a flash sale's) are picked up.
type Source func(ctx context.Context) ([]*delayq.Queue, error)

// Static is a Source of a fixed set of queues.
func Static(qs ...*delayq.Queue) Source {
	return func(context.Context) ([]*delayq.Queue, error) { return qs, nil }
}

// Task is periodic housekeeping run between rounds (purging expired
// idempotency keys, reconciling). It must do bounded work.
type Task struct {
	Name  string
	Every time.Duration
	Run   func(ctx context.Context, now time.Time) error
}

// Defaults.
const (
	DefaultBatch       = 500
	DefaultLease       = 30 * time.Second
	DefaultInterval    = time.Second
	DefaultRetryDelay  = time.Second
	DefaultConcurrency = 8
)

// Config configures a Poller.
type Config struct {
	Queues     Source
	Dispatcher Dispatcher
	Clock      clock.Clock
	Logger     *slog.Logger
	// Batch is the most jobs claimed from one shard per claim.
	Batch int
	// Lease is how long a claimed job stays invisible before it is returned.
	Lease time.Duration
	// Interval caps the sleep between rounds.
	Interval time.Duration
	// RetryDelay is how long a job the dispatcher refused waits to be claimed
	// again.
	RetryDelay time.Duration
	// Ack makes the poller ack the jobs the dispatcher accepted: right for SQS,
	// which then owns them. Leave it false when the dispatcher's consumer acks
	// each job itself once done (the local stand-in).
	Ack bool
	// Concurrency bounds the shards worked on at once.
	Concurrency int
	// Tasks run between rounds, each at most once per its Every.
	Tasks []Task
	// OnClaim, if set, sees every batch just before it is handed over, with the
	// time of handing over (used to measure scheduling lag).
	OnClaim func(jobs []delayq.Job, at time.Time)
	// Metrics, if set, receives what the poller did (Claimed, Refused,
	// Reaped, PollerFailures, DispatchLagMs) every MetricsEvery and when Run
	// returns.
	Metrics      *metrics.Emitter
	MetricsEvery time.Duration
}

// Poller runs rounds of claim, dispatch and ack.
type Poller struct {
	cfg  Config
	wake chan struct{}
	lag  metrics.Sample

	mu       sync.Mutex
	lastTask map[string]time.Time
}

// New checks cfg, fills in defaults and returns a Poller.
func New(cfg Config) (*Poller, error) {
	if cfg.Queues == nil || cfg.Dispatcher == nil || cfg.Clock == nil {
		return nil, errors.New("poller: needs queues, a dispatcher and a clock")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.Lease = cmp.Or(cfg.Lease, DefaultLease)
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, DefaultRetryDelay)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, DefaultConcurrency)
	cfg.MetricsEvery = cmp.Or(cfg.MetricsEvery, 10*time.Second)
	if cfg.Batch < 1 || cfg.Batch > delayq.MaxBatch || cfg.Lease <= 0 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("poller: bad settings: batch %d, lease %s, interval %s", cfg.Batch, cfg.Lease, cfg.Interval)
	}
	return &Poller{cfg: cfg, wake: make(chan struct{}, 1), lastTask: map[string]time.Time{}}, nil
}

// Notify tells a sleeping poller that a job was scheduled at due, so it wakes
// early if due comes before its planned wake-up. It never blocks.
func (p *Poller) Notify(due time.Time) {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Totals count what a poller did. Failures counts the rounds that failed:
// Redis refused or did not answer, or the dispatcher reported an error.
type Totals struct {
	Rounds   int `json:"rounds"`
	Claimed  int `json:"claimed"`
	Refused  int `json:"refused"`
	Reaped   int `json:"reaped"`
	Failures int `json:"failures"`
}

func (t *Totals) add(r RoundResult) {
	t.Rounds++
	t.Claimed += r.Claimed
	t.Refused += r.Refused
	t.Reaped += r.Reaped
}

// RoundResult is what one round did.
type RoundResult struct {
	Claimed int
	Refused int
	Reaped  int
	// More is set when some shard had more due jobs than one batch.
	More bool
	// Next is the earliest due time still waiting; zero if none.
	Next time.Time
	// DispatchErr is the last error a dispatcher reported in the round, if
	// any. The jobs it refused were re-scheduled, so nothing was lost, but
	// the round counts as failed: a work queue refusing jobs must alert.
	DispatchErr error
}

// Run polls until ctx is done or until is reached (zero: no limit). A round
// under way when ctx is cancelled is finished, so what it claimed is handed
// over and acked before Run returns.
func (p *Poller) Run(ctx context.Context, until time.Time) Totals {
	tot, _ := p.run(ctx, until)
	return tot
}

// run is Run that also returns the last failed round's error.
func (p *Poller) run(ctx context.Context, until time.Time) (Totals, error) {
	var (
		tot, unreported Totals
		last            error
	)
	flushed := p.cfg.Clock.Now()
	defer func() { p.report(unreported) }()
	for {
		now := p.cfg.Clock.Now()
		if ctx.Err() != nil || (!until.IsZero() && !now.Before(until)) {
			return tot, last
		}
		if now.Sub(flushed) >= p.cfg.MetricsEvery {
			p.report(unreported)
			unreported, flushed = Totals{}, now
		}
		p.runTasks(ctx, now)
		r, err := p.round(context.WithoutCancel(ctx), until)
		tot.add(r)
		unreported.add(r)
		if err == nil {
			err = r.DispatchErr // logged where it happened
		} else {
			p.cfg.Logger.Error("poll round failed", "error", err.Error())
		}
		wake := now.Add(p.cfg.Interval)
		switch {
		case err != nil:
			// Counted, then polling goes on: a blip must not leave the
			// queue unwatched until the next invocation.
			tot.Failures++
			unreported.Failures++
			last = err
		case r.More:
			continue
		case !r.Next.IsZero() && r.Next.Before(wake):
			wake = r.Next
		}
		if !until.IsZero() && until.Before(wake) {
			wake = until
		}
		p.sleep(ctx, wake)
	}
}

// report emits what the poller did since the last report.
func (p *Poller) report(t Totals) {
	p.cfg.Metrics.Emit(nil,
		metrics.Of(metrics.Claimed, metrics.Count, float64(t.Claimed)),
		metrics.Of(metrics.Refused, metrics.Count, float64(t.Refused)),
		metrics.Of(metrics.Reaped, metrics.Count, float64(t.Reaped)),
		metrics.Of(metrics.PollerFailures, metrics.Count, float64(t.Failures)),
		metrics.Value{Name: metrics.DispatchLagMs, Unit: metrics.Milliseconds, Values: p.lag.Take()},
	)
}

func (p *Poller) sleep(ctx context.Context, wake time.Time) {
	d := wake.Sub(p.cfg.Clock.Now())
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-p.wake:
	}
}

func (p *Poller) runTasks(ctx context.Context, now time.Time) {
	for _, t := range p.cfg.Tasks {
		p.mu.Lock()
		last, ran := p.lastTask[t.Name]
		due := !ran || now.Sub(last) >= t.Every
		if due {
			p.lastTask[t.Name] = now
		}
		p.mu.Unlock()
		if !due {
			continue
		}
		if err := t.Run(ctx, now); err != nil {
			p.cfg.Logger.Error("housekeeping failed", "task", t.Name, "error", err.Error())
			p.cfg.Metrics.Count(metrics.HousekeepingFailures, 1, nil)
			p.cfg.Metrics.Count(metrics.HousekeepingFailures, 1, map[string]string{"Task": t.Name})
		}
	}
}

// Round claims, dispatches and acks one batch from every shard of every queue.
// Its error means Redis failed it; a dispatcher's error is in DispatchErr.
func (p *Poller) Round(ctx context.Context) (RoundResult, error) { return p.round(ctx, time.Time{}) }

// round is Round whose dispatches end by until (if not zero), so that a hung
// work queue cannot keep the poller past its invocation's margin.
func (p *Poller) round(ctx context.Context, until time.Time) (RoundResult, error) {
	queues, err := p.cfg.Queues(ctx)
	if err != nil {
		return RoundResult{}, fmt.Errorf("poller: list queues: %w", err)
	}
	var (
		mu  sync.Mutex
		res RoundResult
	)
	// No shared cancellation: one shard's failure must not abort another
	// shard between its claim and its ack.
	var g errgroup.Group
	g.SetLimit(p.cfg.Concurrency)
	for _, q := range queues {
		for n := range q.Shards() {
			g.Go(func() error {
				r, err := p.shard(ctx, q, n, until)
				mu.Lock()
				defer mu.Unlock()
				res.Claimed += r.Claimed
				res.Refused += r.Refused
				res.Reaped += r.Reaped
				res.More = res.More || r.More
				res.DispatchErr = cmp.Or(r.DispatchErr, res.DispatchErr)
				if !r.Next.IsZero() && (res.Next.IsZero() || r.Next.Before(res.Next)) {
					res.Next = r.Next
				}
				return err
			})
		}
	}
	return res, g.Wait()
}

// ChainedBatches bounds the batches one shard works through in one round
// while they come full; each batch's ack travels with the next claim, so a
// backlog costs one round trip per batch.
const ChainedBatches = 8

// shard claims due jobs of shard n, hands them over and acks them.
func (p *Poller) shard(ctx context.Context, q *delayq.Queue, n int, until time.Time) (RoundResult, error) {
	var (
		r       RoundResult
		retryAt time.Time // earliest re-schedule of a refused job
	)
	done := func(err error) (RoundResult, error) {
		if !retryAt.IsZero() && (r.Next.IsZero() || retryAt.Before(r.Next)) {
			r.Next = retryAt
		}
		return r, err
	}
	c, err := q.Claim(ctx, n, p.cfg.Clock.Now(), p.cfg.Lease, p.cfg.Batch)
	for i := 1; ; i++ {
		if err != nil {
			return done(err)
		}
		r.Claimed += len(c.Jobs)
		r.Reaped += c.Reaped
		r.More, r.Next = len(c.Jobs) == p.cfg.Batch, c.Next
		if c.Reaped > 0 {
			p.cfg.Logger.Warn("expired leases returned", "queue", q.Name(), "shard", n, "jobs", c.Reaped)
		}
		if len(c.Jobs) == 0 {
			return done(nil)
		}
		// herr, not err: an err declared here would shadow the loop's, and
		// a failed chained ack (AckClaim below) would go unseen.
		accepted, refused, refusedAt, derr, herr := p.handOver(ctx, q, n, c, until)
		r.Refused += refused
		r.DispatchErr = cmp.Or(derr, r.DispatchErr)
		if !refusedAt.IsZero() && retryAt.IsZero() {
			retryAt = refusedAt
		}
		if herr != nil || !p.cfg.Ack {
			return done(herr)
		}
		// Every job handed over (the common case): the whole lease is acked
		// by its token, one command whatever the batch size.
		whole := refused == 0
		// After a dispatch error the shard stops for this round: the next
		// batch would most likely fail the same way.
		if !r.More || i == ChainedBatches || derr != nil {
			// The round's last batch is acked alone. Should an ack fail, the
			// lease expires and the jobs are sent again, which the consumer
			// tolerates (it is idempotent); nothing is lost.
			if whole {
				_, err = q.AckLease(ctx, n, c.Lease)
			} else {
				_, err = q.Ack(ctx, n, c.Lease, accepted...)
			}
			return done(err)
		}
		_, c, err = q.AckClaim(ctx, n, c.Lease, whole, accepted, p.cfg.Clock.Now(), p.cfg.Lease, p.cfg.Batch)
	}
}

// handOver dispatches a claim's jobs and schedules the refused ones again
// after RetryDelay (a job we fail to re-schedule keeps its lease and comes
// back when it expires). It returns the number refused, when those are due
// again, the dispatcher's error (nil when the dispatch was only cut short by
// until: the jobs wait for the next invocation, nothing failed) and, only if
// some were refused (otherwise the whole lease is acked), the ids handed
// over. The dispatch ends by until, if not zero.
func (p *Poller) handOver(ctx context.Context, q *delayq.Queue, n int, c delayq.Claim, until time.Time) ([]string, int, time.Time, error, error) {
	handed := p.cfg.Clock.Now()
	if p.cfg.OnClaim != nil {
		p.cfg.OnClaim(c.Jobs, handed)
	}
	if p.cfg.Metrics != nil {
		for _, j := range c.Jobs {
			p.lag.Add(float64(handed.UnixMilli() - j.Due))
		}
	}
	dctx := ctx
	if !until.IsZero() {
		// Measured on the poller's clock, which set until.
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, until.Sub(handed))
		defer cancel()
	}
	refused, derr := p.cfg.Dispatcher.Dispatch(dctx, c.Jobs)
	switch {
	case derr != nil && dctx.Err() != nil && ctx.Err() == nil:
		p.cfg.Logger.Warn("dispatch cut short at the end of polling", "queue", q.Name(), "shard", n,
			"refused", len(refused), "error", derr.Error())
		derr = nil
	case derr != nil:
		p.cfg.Logger.Error("dispatch failed", "queue", q.Name(), "shard", n, "refused", len(refused), "error", derr.Error())
		derr = fmt.Errorf("poller: dispatch %s shard %d: %w", q.Name(), n, derr)
	}
	if len(refused) == 0 {
		return nil, 0, time.Time{}, derr, nil
	}
	retryAt := p.cfg.Clock.Now().Add(p.cfg.RetryDelay)
	skip := make(map[string]bool, len(refused))
	for _, j := range refused {
		skip[j.ID] = true
		if err := q.RetryAt(ctx, n, j.ID, c.Lease, retryAt); err != nil && !errors.Is(err, delayq.ErrLeaseLost) {
			return nil, len(refused), retryAt, derr, err
		}
	}
	accepted := make([]string, 0, len(c.Jobs)-len(refused))
	for _, j := range c.Jobs {
		if !skip[j.ID] {
			accepted = append(accepted, j.ID)
		}
	}
	return accepted, len(refused), retryAt, derr, nil
}

// Handler returns the Lambda handler of the scheduled poller: it polls until
// margin before the invocation's deadline, then reports what it did. If any
// round failed the invocation fails, with a summary error, so that Lambda's
// Errors metric counts it; it still polls until the margin, because a failed
// round may be a blip and stopping would leave the queue unwatched.
func (p *Poller) Handler(margin time.Duration) func(ctx context.Context, ev events.EventBridgeEvent) (Totals, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (Totals, error) {
		until := p.cfg.Clock.Now().Add(time.Minute)
		if d, ok := ctx.Deadline(); ok {
			until = d.Add(-margin)
		}
		tot, last := p.run(ctx, until)
		p.cfg.Logger.Info("poller invocation done", "event_id", ev.ID, "rounds", tot.Rounds,
			"claimed", tot.Claimed, "refused", tot.Refused, "reaped", tot.Reaped, "failures", tot.Failures)
		if tot.Failures > 0 {
			return tot, fmt.Errorf("poller: %d of %d rounds failed, the last: %w", tot.Failures, tot.Rounds, last)
		}
		return tot, nil
	}
}
