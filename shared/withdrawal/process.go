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
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/metrics"
)

// Provider pays withdrawals out. The withdrawal id is the idempotency key: the
// provider pays one id at most once however often it is asked, while it
// remembers the key (see ProcessorConfig.IdempotencyWindow).
//
// Pay's error wraps ErrPermanent when the provider refused the payout for
// good, ErrOutcomeUnknown when the call may have paid (no answer after the
// request may have left, or the provider still processing the key),
// ErrRejected when the provider refused our credentials; any other error is
// transient (408, 429, 5xx, or a call that surely never left).
//
// Lookup asks the provider what became of a payout, to settle a call whose
// outcome is unknown before anything is sent again; its error (ErrNoLookup
// for a provider without one) means it settled nothing.
type Provider interface {
	Pay(ctx context.Context, w Withdrawal) (payoutID string, err error)
	Lookup(ctx context.Context, w Withdrawal) (Lookup, error)
}

// LookupState is what the provider says of a payout.
type LookupState int

// Lookup answers.
const (
	// LookupPaid: the provider paid it (authoritative).
	LookupPaid LookupState = iota + 1
	// LookupFailed: the provider refused or failed it for good (authoritative).
	LookupFailed
	// LookupPending: the provider holds the request and has not settled it.
	LookupPending
	// LookupNotFound: the provider never received the request
	// (authoritative): sending it is safe.
	LookupNotFound
)

// Lookup is the provider's answer about one payout.
type Lookup struct {
	State    LookupState
	PayoutID string
	// Reason is the provider's word on a failed payout, if any.
	Reason string
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
	// DefaultIdempotencyWindow is how long providers remember an
	// idempotency key (Stripe: 24 h).
	DefaultIdempotencyWindow = 24 * time.Hour
	// DefaultNeverReceivedAfter is how long after the last send's deadline
	// a lookup's 404 proves the provider never got the request: the
	// provider's signature tolerance (5 min: a request signed by then is
	// refused after it), plus 1 min for a lookup that lags behind what the
	// provider received (SPEC.md, outbound contracts).
	DefaultNeverReceivedAfter = 5*time.Minute + time.Minute
)

// ProcessorConfig configures a Processor.
type ProcessorConfig struct {
	Ledger   Ledger
	Provider Provider
	Notifier Notifier
	Clock    clock.Clock
	Logger   *slog.Logger
	// MaxAttempts is the number of provider calls after which a transient
	// failure becomes final, unless a call may have paid: then nothing but
	// an authoritative answer ends it, and it is retried past MaxAttempts.
	MaxAttempts int
	// RetryBase is the delay before the first retry; it doubles with each
	// attempt, with jitter, up to RetryCap.
	RetryBase time.Duration
	RetryCap  time.Duration
	// AttemptTimeout bounds one attempt (it must exceed the provider call's
	// timeout); past it another consumer may take the withdrawal over.
	AttemptTimeout time.Duration
	// IdempotencyWindow is how long the provider remembers an idempotency
	// key: a request first sent longer ago is never sent again blind, nor
	// one that could reach the provider past it (a request may arrive
	// until NeverReceivedAfter past its attempt's deadline); the lookup
	// settles it, or an operator (default DefaultIdempotencyWindow).
	IdempotencyWindow time.Duration
	// NeverReceivedAfter is how long after an attempt's deadline a request
	// it sent may still reach the provider and show in its lookup; a
	// lookup's 404 proves "never received" only once it has passed since
	// Withdrawal.SentUntil (default DefaultNeverReceivedAfter). Before
	// then the request is sent again under the same key, and the record
	// keeps saying it may have been paid.
	NeverReceivedAfter time.Duration
	// Metrics, if set, counts payouts paid, failed, retried, unresolved and
	// refused for our credentials.
	Metrics *metrics.Emitter
	// Jitter returns a random duration in [0, n]; nil means math/rand/v2
	// (tests that replay runs pass a seeded one).
	Jitter func(n time.Duration) time.Duration
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
	cfg.IdempotencyWindow = cmp.Or(cfg.IdempotencyWindow, DefaultIdempotencyWindow)
	cfg.NeverReceivedAfter = cmp.Or(cfg.NeverReceivedAfter, DefaultNeverReceivedAfter)
	if cfg.Jitter == nil {
		cfg.Jitter = func(n time.Duration) time.Duration { return rand.N(n + 1) }
	}
	if cfg.MaxAttempts < 1 || cfg.RetryBase <= 0 || cfg.RetryCap < cfg.RetryBase || cfg.AttemptTimeout <= 0 || cfg.IdempotencyWindow <= 0 ||
		cfg.NeverReceivedAfter <= 0 {
		return nil, fmt.Errorf("withdrawal: bad payout settings: %d attempts, retry %s..%s, attempt timeout %s, idempotency window %s",
			cfg.MaxAttempts, cfg.RetryBase, cfg.RetryCap, cfg.AttemptTimeout, cfg.IdempotencyWindow)
	}
	return &Processor{cfg: cfg}, nil
}

// NewAttemptID returns a new payout attempt id.
func NewAttemptID(now time.Time) string { return newID("at_", now) }

// Process runs the payout step for one delivery of a withdrawal job. It is
// safe under duplicate and concurrent deliveries: the ledger admits one
// attempt at a time and fences every write by the attempt's id, and the
// provider sees one idempotency key per withdrawal.
//
// An attempt ends three ways: paid (2xx), refused (a definitive no), or
// unknown (no answer after the request may have left, a consumer that died
// mid-call): the record then remembers for good that the payout may have
// been made, and from then on it is never failed or cancelled; each later
// attempt first asks the provider's lookup, and sends again (under the same
// key) only while the provider still remembers the key.
//
// A nil error means the delivery is done with (paid, failed, retry
// scheduled, cancelled, a stale duplicate, or another consumer's attempt
// under way, which the ledger follows up); an error means deliver it again
// later.
func (p *Processor) Process(ctx context.Context, ref Ref) error {
	return p.ProcessClaimed(ctx, ref, time.Time{})
}

// ProcessClaimed is Process for a delivery claimed for due time claimed
// (the job's score; see Begin.Claimed): what the consumer runs.
func (p *Processor) ProcessClaimed(ctx context.Context, ref Ref, claimed time.Time) error {
	now := p.now()
	attempt := NewAttemptID(now)
	w, start, err := p.cfg.Ledger.Begin(ctx, ref, Begin{Attempt: attempt, Now: now, Until: now.Add(p.cfg.AttemptTimeout),
		Claimed: claimed})
	if err != nil {
		return err
	}
	// From here on every line, and the provider and finance calls, carry the
	// create's request id; the consumer's own lines about the job too.
	ctx = correlation.With(ctx, w.RequestID)
	log := correlation.Logger(p.cfg.Logger, w.RequestID).With("withdrawal_id", w.ID)
	switch start {
	case StartBusy:
		log.Info("payout in progress elsewhere; job due again at its deadline",
			"until", clock.Format(w.ProcessingUntil))
		return nil
	case StartNotDue:
		log.Info("early payout job put back at its due time", "status", w.Status, "due_at", clock.Format(w.DueAt))
		return nil
	case StartFinal:
		return p.notify(ctx, w, log)
	}
	// No provider call of this attempt is made, or still running, past its
	// deadline, when another consumer may take the withdrawal over.
	ctx = WithCallDeadline(ctx, w.ProcessingUntil)
	w, err = p.attempt(ctx, w, attempt, log.With("attempt", attempt))
	if errors.Is(err, ErrStale) {
		// Another consumer took the attempt over, or an operator or a
		// callback settled the withdrawal meanwhile: the record says where
		// things stand, and a final one may still need finance told.
		log.Warn("payout attempt superseded", "attempt", attempt, "status", w.Status)
		return p.notify(ctx, w, log)
	}
	if err != nil {
		return err
	}
	switch w.Status {
	case Paid:
		p.cfg.Metrics.Count(metrics.PayoutsPaid, 1, nil)
		if !w.ProcessedAt.IsZero() {
			p.cfg.Metrics.Emit(nil, metrics.Of(metrics.PayoutDueToPaidMs, metrics.Milliseconds,
				float64(max(w.ProcessedAt.Sub(w.DueAt), 0).Milliseconds())))
		}
	case Failed:
		p.cfg.Metrics.Count(metrics.PayoutsFailed, 1, nil)
	case Retrying:
		p.cfg.Metrics.Count(metrics.PayoutRetries, 1, nil)
	}
	return p.notify(ctx, w, log)
}

func (p *Processor) now() time.Time { return p.cfg.Clock.Now().UTC() }

// attempt runs a begun attempt on w to its end and records it.
func (p *Processor) attempt(ctx context.Context, w Withdrawal, attempt string, log *slog.Logger) (Withdrawal, error) {
	if w.MaybePaid {
		// An earlier call may have paid: settle that first.
		lk, lerr := p.cfg.Provider.Lookup(ctx, w)
		now := p.now()
		notFound := lerr == nil && lk.State == LookupNotFound
		// A 404 proves "never received" only once no request we sent can
		// still arrive: one signed by the last send's deadline is refused
		// by the provider after its signature tolerance.
		provenAt := w.SentBy(p.cfg.AttemptTimeout).Add(p.cfg.NeverReceivedAfter)
		var err error
		switch {
		case lerr == nil && lk.State == LookupPaid:
			log.Info("unknown payout outcome settled by the provider's lookup: paid")
			return p.paid(ctx, w, attempt, lk.PayoutID, now, log)
		case lerr == nil && lk.State == LookupFailed:
			log.Warn("unknown payout outcome settled by the provider's lookup: failed", "reason", lk.Reason)
			return p.advance(ctx, w, Finish{Attempt: attempt, Result: Result{Status: Failed, At: now,
				LastError: "payout: the provider reports the payout failed: " + lk.Reason}})
		case lerr == nil && lk.State == LookupPending:
			return p.retry(ctx, w, attempt, now, errors.New("payout: the provider reports the payout pending"), true, log)
		case errors.Is(lerr, ErrTooLate):
			return p.retry(ctx, w, attempt, now, lerr, true, log)
		case notFound && now.After(provenAt):
			log.Info("the provider never received the payout request; sending it")
			w, err = p.advance(ctx, w, Send{Attempt: attempt, Now: now, NeverReceived: true})
		case !w.FirstSentAt.IsZero() && p.landsBy(w).Sub(w.FirstSentAt) > p.cfg.IdempotencyWindow:
			// The provider may have forgotten the key by the time a
			// request sent again now reaches it: it could pay a second
			// time.
			if notFound {
				lerr = fmt.Errorf("the lookup has not seen the request, which proves nothing before %s", clock.Format(provenAt))
			}
			p.cfg.Metrics.Count(metrics.PayoutsUnresolved, 1, nil)
			cause := fmt.Errorf("payout: outcome unknown and first sent %s ago: a request sent again could reach the provider "+
				"past its idempotency window (%s): not sent again; settled by the lookup or by an operator "+
				"(hourglass payouts resolve): %w",
				now.Sub(w.FirstSentAt).Round(time.Second), p.cfg.IdempotencyWindow, lerr)
			log.Error("payout outcome unknown past the idempotency window; waiting for a lookup or an operator",
				"first_sent_at", clock.Format(w.FirstSentAt), "error", lerr.Error())
			// The capped backoff: nothing but a lookup or an operator can
			// end it now, so there is no hurry.
			return p.advance(ctx, w, Retry{Attempt: attempt, RetryAt: RetryAt{At: now.Add(p.Backoff(64)), Now: now,
				LastError: cause.Error(), MaybePaid: true}})
		default:
			switch {
			case notFound:
				// A request of ours may still be on its way (a consumer
				// that stalled past its deadline): sending again under the
				// same key cannot pay twice; forgetting it could.
				log.Info("the provider's lookup has not seen the payout request, which proves nothing yet; "+
					"asking again under the same key", "proof_after", clock.Format(provenAt))
			case !errors.Is(lerr, ErrNoLookup):
				log.Warn("payout lookup told nothing; asking again under the same key", "error", lerr.Error())
			}
			w, err = p.advance(ctx, w, Send{Attempt: attempt, Now: now})
		}
		if err != nil {
			return w, err
		}
	}

	payoutID, payErr := p.cfg.Provider.Pay(ctx, w)
	now := p.now()
	switch {
	case payErr == nil:
		return p.paid(ctx, w, attempt, payoutID, now, log)
	case errors.Is(payErr, ErrTooLate):
		// Nothing left: no verdict, and the record keeps what it knew.
		return p.retry(ctx, w, attempt, now, payErr, false, log)
	case errors.Is(payErr, ErrPermanent):
		log.Warn("payout refused for good", "attempts", w.Attempts, "error", payErr.Error())
		return p.advance(ctx, w, Finish{Attempt: attempt, Result: Result{Status: Failed, LastError: payErr.Error(), At: now}})
	case errors.Is(payErr, ErrRejected):
		// Our credentials, not the payout: never a verdict.
		p.cfg.Metrics.Count(metrics.PayoutsRejected, 1, nil)
		log.Error("the provider refused our credentials; retrying, never failing", "error", payErr.Error())
		return p.retry(ctx, w, attempt, now, payErr, false, log)
	case errors.Is(payErr, ErrOutcomeUnknown):
		return p.retry(ctx, w, attempt, now, payErr, true, log)
	case !w.MaybePaid && w.Attempts >= p.cfg.MaxAttempts:
		log.Warn("payout failed for good", "attempts", w.Attempts, "error", payErr.Error())
		return p.advance(ctx, w, Finish{Attempt: attempt, Result: Result{Status: Failed, LastError: payErr.Error(), At: now}})
	}
	return p.retry(ctx, w, attempt, now, payErr, false, log)
}

// landsBy is the latest a payout request that the attempt on w sends may
// reach the provider: the attempt's deadline bounds the call, and a
// request still on its way may arrive until NeverReceivedAfter past it.
// A request sent again blind must reach the provider within its
// idempotency window, counted from the first send, or it may pay twice.
func (p *Processor) landsBy(w Withdrawal) time.Time {
	return w.ProcessingUntil.Add(p.cfg.NeverReceivedAfter)
}

// paid records the provider's word that w was paid (a 2xx, or its lookup).
// An attempt that was taken over meanwhile (it outlived its deadline: a
// stalled consumer) or whose withdrawal was settled otherwise cannot
// finish; its 2xx is recorded all the same, as the provider's callback
// would be: once, never moving the withdrawal backwards, a contradiction
// (paid after failed or cancelled) kept out and reported. It then answers
// ErrStale with the record as it stands.
func (p *Processor) paid(ctx context.Context, w Withdrawal, attempt, payoutID string, now time.Time, log *slog.Logger) (Withdrawal, error) {
	got, err := p.advance(ctx, w, Finish{Attempt: attempt, Result: Result{Status: Paid, PayoutID: payoutID, At: now}})
	if !errors.Is(err, ErrStale) {
		return got, err
	}
	got, applied, err := p.cfg.Ledger.Apply(ctx, w.ID, Callback{EventID: "attempt:" + attempt, Status: Paid,
		PayoutID: payoutID, At: now})
	if err != nil {
		return got, fmt.Errorf("withdrawal: record the paid answer of superseded attempt %s: %w", attempt, err)
	}
	switch applied {
	case Conflict:
		p.cfg.Metrics.Count(metrics.PayoutConflicts, 1, nil)
		log.Error("the provider paid a superseded attempt of a withdrawal that ended otherwise; left for an operator",
			"status", got.Status, "payout_id", payoutID)
	case Changed:
		log.Warn("superseded payout attempt was paid; recorded", "status", got.Status)
	}
	return got, fmt.Errorf("withdrawal: %s: %w", w.ID, ErrStale)
}

// advance records event e of an attempt on w, the record as the attempt
// last read it (no read first: one round trip), and returns the record
// after it, or as it stands with the refusal (ErrStale: taken over).
func (p *Processor) advance(ctx context.Context, w Withdrawal, e Event) (Withdrawal, error) {
	d, err := p.cfg.Ledger.Advance(ctx, w, e)
	return d.Next, err
}

// retry schedules the next attempt after one that ended without a verdict.
func (p *Processor) retry(ctx context.Context, w Withdrawal, attempt string, now time.Time, cause error, maybePaid bool, log *slog.Logger) (Withdrawal, error) {
	at := now.Add(p.Backoff(max(w.Attempts, 1)))
	got, err := p.advance(ctx, w, Retry{Attempt: attempt, RetryAt: RetryAt{At: at, Now: now, LastError: cause.Error(), MaybePaid: maybePaid}})
	if err != nil {
		return got, err
	}
	if got.MaybePaid && got.Attempts >= p.cfg.MaxAttempts {
		p.cfg.Metrics.Count(metrics.PayoutsUnresolved, 1, nil)
		log.Error("payout outcome still unknown; asking the provider again until it answers",
			"attempts", got.Attempts, "retry_at", clock.Format(at), "error", cause.Error())
	} else {
		log.Warn("payout not settled, retry scheduled", "attempts", got.Attempts, "may_have_paid", got.MaybePaid,
			"retry_at", clock.Format(at), "error", cause.Error())
	}
	return got, nil
}

// notify tells finance of a paid, failed or returned withdrawal once it is
// (at least once: a crash between the two steps tells it again).
func (p *Processor) notify(ctx context.Context, w Withdrawal, log *slog.Logger) error {
	if !w.Untold() {
		return nil
	}
	if err := p.cfg.Notifier.Notify(ctx, w.Processed()); err != nil {
		return fmt.Errorf("withdrawal: tell finance of %s: %w", w.ID, err)
	}
	if _, err := p.cfg.Ledger.Advance(ctx, w, Notified{Status: w.Status}); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("withdrawal: mark %s notified: %w", w.ID, err)
	}
	log.Info("payout processed", "status", w.Status, "attempts", w.Attempts)
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
	return half + p.cfg.Jitter(d-half)
}
