package withdrawal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/metrics"
)

// Provider pays withdrawals out. The withdrawal id is the idempotency key: the
// provider pays one id at most once however often it is asked. An error
// wrapping ErrPermanent means no retry can succeed; one wrapping
// ErrOutcomeUnknown means the call may have paid; any other error is
// transient.
type Provider interface {
	Pay(ctx context.Context, w Withdrawal) (payoutID string, err error)
}

// Notifier tells finance of a processed payout.
type Notifier interface {
	Notify(ctx context.Context, m Processed) error
}

// Defaults of the payout step (SPEC.md "Local stack").
const (
	DefaultMaxAttempts = 8
	DefaultRetryBase   = 30 * time.Second
	DefaultRetryCap    = 30 * time.Minute
)

// ProcessorConfig configures a Processor.
type ProcessorConfig struct {
	Ledger   Ledger
	Provider Provider
	Notifier Notifier
	Clock    clock.Clock
	Logger   *slog.Logger
	// MaxAttempts is the number of provider calls after which a transient
	// failure becomes final.
	MaxAttempts int
	// RetryBase is the delay before the first retry; it doubles with each
	// attempt, with jitter, up to RetryCap.
	RetryBase time.Duration
	RetryCap  time.Duration
	// AttemptTimeout bounds one attempt (it must exceed the provider call's
	// timeout); past it another consumer may take the withdrawal over.
	AttemptTimeout time.Duration
	// Metrics, if set, counts payouts paid, failed and retried.
	Metrics *metrics.Emitter
}

// Processor is the payout step of a withdrawal job.
type Processor struct {
	cfg ProcessorConfig
}

// NewProcessor checks cfg, fills in defaults and returns a Processor.
func NewProcessor(cfg ProcessorConfig) (*Processor, error) {
	if cfg.Ledger == nil || cfg.Provider == nil || cfg.Notifier == nil || cfg.Clock == nil {
		return nil, errors.New("withdrawal: processor needs a ledger, a provider, a notifier and a clock")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, DefaultRetryBase)
	cfg.RetryCap = cmp.Or(cfg.RetryCap, DefaultRetryCap)
	cfg.AttemptTimeout = cmp.Or(cfg.AttemptTimeout, 30*time.Second)
	if cfg.MaxAttempts < 1 || cfg.RetryBase <= 0 || cfg.RetryCap < cfg.RetryBase || cfg.AttemptTimeout <= 0 {
		return nil, fmt.Errorf("withdrawal: bad payout settings: %d attempts, retry %s..%s, attempt timeout %s",
			cfg.MaxAttempts, cfg.RetryBase, cfg.RetryCap, cfg.AttemptTimeout)
	}
	return &Processor{cfg: cfg}, nil
}

// Process runs the payout step for one delivery of a withdrawal job. It is
// safe under duplicate and concurrent deliveries: the ledger admits one
// attempt at a time, and the provider sees one idempotency key per withdrawal.
// A nil error means the delivery is done with (paid, failed, retry scheduled,
// cancelled, a stale duplicate, or another consumer's attempt under way, which
// the ledger follows up); an error means deliver it again later.
func (p *Processor) Process(ctx context.Context, ref Ref) error {
	now := p.cfg.Clock.Now().UTC()
	w, start, err := p.cfg.Ledger.Begin(ctx, ref, now, now.Add(p.cfg.AttemptTimeout))
	if err != nil {
		return err
	}
	log := p.cfg.Logger.With("withdrawal_id", w.ID)
	switch start {
	case StartBusy:
		log.Info("payout in progress elsewhere; job due again at its deadline",
			"until", clock.Format(w.ProcessingUntil))
		return nil
	case StartNotDue:
		log.Info("stale payout job dropped", "status", w.Status, "due_at", clock.Format(w.DueAt))
		return nil
	case StartFinal:
		return p.notify(ctx, w)
	}

	payoutID, payErr := p.cfg.Provider.Pay(ctx, w)
	now = p.cfg.Clock.Now().UTC()
	attempt := w.Attempts
	switch {
	case payErr == nil:
		w, err = p.cfg.Ledger.Finish(ctx, ref, attempt, Result{Status: Paid, PayoutID: payoutID, At: now})
	case errors.Is(payErr, ErrPermanent) || (attempt >= p.cfg.MaxAttempts && !errors.Is(payErr, ErrOutcomeUnknown)):
		w, err = p.cfg.Ledger.Finish(ctx, ref, attempt, Result{Status: Failed, LastError: payErr.Error(), At: now})
		if err == nil {
			log.Warn("payout failed for good", "attempts", attempt, "error", payErr.Error())
		}
	default:
		// A transient failure, or an unanswered call that may have paid: at
		// MaxAttempts the first becomes final, the second is asked again (the
		// backoff growing to its cap) until the provider answers, never failed.
		at := now.Add(p.Backoff(attempt))
		w, err = p.cfg.Ledger.Retry(ctx, ref, attempt, at, now, payErr.Error())
		switch {
		case err != nil:
		case attempt >= p.cfg.MaxAttempts:
			p.cfg.Metrics.Count(metrics.PayoutsUnresolved, 1, nil)
			log.Error("payout outcome still unknown; asking the provider again until it answers",
				"attempts", attempt, "retry_at", clock.Format(at), "error", payErr.Error())
		default:
			log.Warn("payout failed, retry scheduled", "attempts", attempt, "retry_at", clock.Format(at), "error", payErr.Error())
		}
	}
	if err == nil {
		switch w.Status {
		case Paid:
			p.cfg.Metrics.Count(metrics.PayoutsPaid, 1, nil)
		case Failed:
			p.cfg.Metrics.Count(metrics.PayoutsFailed, 1, nil)
		case Retrying:
			p.cfg.Metrics.Count(metrics.PayoutRetries, 1, nil)
		}
	}
	if errors.Is(err, ErrStale) {
		// Another consumer took the attempt over, or our own write landed
		// and its reply was lost and retried: either way the record says
		// where things stand, and a final one may still need finance told.
		log.Warn("payout attempt superseded", "attempt", attempt, "status", w.Status)
		return p.notify(ctx, w)
	}
	if err != nil {
		return err
	}
	return p.notify(ctx, w)
}

// notify tells finance of a paid or failed withdrawal once (at least once:
// a crash between the two steps tells it again).
func (p *Processor) notify(ctx context.Context, w Withdrawal) error {
	if (w.Status != Paid && w.Status != Failed) || w.Notified {
		return nil
	}
	if err := p.cfg.Notifier.Notify(ctx, w.Processed()); err != nil {
		return fmt.Errorf("withdrawal: tell finance of %s: %w", w.ID, err)
	}
	if err := p.cfg.Ledger.MarkNotified(ctx, w.Ref()); err != nil {
		return err
	}
	p.cfg.Logger.Info("payout processed", "withdrawal_id", w.ID, "status", w.Status, "attempts", w.Attempts)
	return nil
}

// Backoff is the delay before the retry that follows attempt number attempt:
// RetryBase doubled per attempt, capped at RetryCap, with "equal jitter" (half
// fixed, half random) so that retries of a provider outage spread out.
func (p *Processor) Backoff(attempt int) time.Duration {
	d := p.cfg.RetryCap
	if attempt-1 < 32 {
		if b := p.cfg.RetryBase << (attempt - 1); b > 0 && b < d {
			d = b
		}
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
