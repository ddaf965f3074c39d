package withdrawal

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/metrics"
	"github.com/hourglass/hourglass/shared/validation"
)

// Defaults of idempotency-key handling.
const (
	// DefaultKeyLock is how long a reserved key blocks other requests before an
	// unfinished reservation (its request died) may be taken over.
	DefaultKeyLock = 30 * time.Second
	// DefaultKeyRetention is how long a key is remembered.
	DefaultKeyRetention = 24 * time.Hour
)

// Config configures a Service.
type Config struct {
	Ledger Ledger
	Clock  clock.Clock
	Rules  Rules
	// ShardFor maps a user to the delay-queue shard of their withdrawals.
	ShardFor func(userID string) int
	// OnScheduled, if set, hears of every new due time (the local stack uses it
	// to wake its poller early).
	OnScheduled func(due time.Time)
	// KeyLock and KeyRetention default to DefaultKeyLock and DefaultKeyRetention.
	KeyLock      time.Duration
	KeyRetention time.Duration
	// Logger (default slog.Default) and Metrics (optional) hear of
	// callbacks and resolutions.
	Logger  *slog.Logger
	Metrics *metrics.Emitter
}

// Service is the withdrawal API: create, read, list and cancel; and what
// settles a payout from outside an attempt: the provider's callbacks and an
// operator's resolution.
type Service struct {
	cfg Config
}

// NewService checks cfg and returns a Service.
func NewService(cfg Config) (*Service, error) {
	if cfg.Ledger == nil || cfg.Clock == nil || cfg.ShardFor == nil {
		return nil, errors.New("withdrawal: service needs a ledger, a clock and a shard map")
	}
	if err := cfg.Rules.Check(); err != nil {
		return nil, err
	}
	cfg.KeyLock = cmp.Or(cfg.KeyLock, DefaultKeyLock)
	cfg.KeyRetention = cmp.Or(cfg.KeyRetention, DefaultKeyRetention)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Service{cfg: cfg}, nil
}

// NewID returns a new withdrawal id; ids sort by creation time.
func NewID(now time.Time) string { return newID("wd_", now) }

// newID is prefix and a ULID of now: ids that sort by creation time.
func newID(prefix string, now time.Time) string {
	return prefix + ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
}

// Created is the answer to a create: the withdrawal as its create made it,
// which for a replay is the withdrawal the first request was answered
// with (its revision 0: an If-Match with its ETag is refused once the
// record moved, never wrongly admitted).
type Created struct {
	Withdrawal
	Replayed bool
}

// ValidKey reports whether k is an acceptable Idempotency-Key: 1-255
// printable ASCII characters.
func ValidKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// Rules are the rules requests are judged by.
func (s *Service) Rules() Rules { return s.cfg.Rules }

// Create validates a request and, unless its idempotency key says otherwise,
// stores and schedules a new withdrawal. A replay is answered before the
// clock judges the request's time: a process_at that passed since the
// first request refuses only a new withdrawal, never the answer to a
// stored one (a 400 there would tell the client nothing was stored, and its
// retry under a new key would pay twice).
func (s *Service) Create(ctx context.Context, userID, idemKey string, req Request) (Created, error) {
	now := s.cfg.Clock.Now().UTC()
	err := s.cfg.Rules.Validate(req)
	if !ValidKey(idemKey) {
		return Created{}, JoinInvalid(
			validation.New("Idempotency-Key", "header is required: 1 to 255 printable ASCII characters"), err)
	}
	if err != nil {
		return Created{}, err
	}
	fp := req.Fingerprint()
	key := IdemKey{UserID: userID, Key: idemKey, Shard: s.cfg.ShardFor(userID)}
	candidate := NewID(now)
	st, err := s.cfg.Ledger.Reserve(ctx, Reservation{
		Key:         key,
		Fingerprint: fp,
		ID:          candidate,
		Now:         now,
		LockUntil:   now.Add(s.cfg.KeyLock),
		ExpiresAt:   now.Add(s.cfg.KeyRetention),
	})
	if err != nil {
		return Created{}, err
	}
	if st.Phase != KeyAcquired && st.Fingerprint != fp {
		return Created{}, ErrIdempotencyConflict
	}
	switch st.Phase {
	case KeyCompleted:
		first, err := DecodeCreated(st.Response, key)
		if err != nil {
			return Created{}, err
		}
		return Created{Withdrawal: first, Replayed: true}, nil
	case KeyInFlight:
		return Created{}, ErrIdempotencyInFlight
	}

	w := Withdrawal{
		ID:          st.ID,
		UserID:      userID,
		Shard:       key.Shard,
		Status:      Scheduled,
		Amount:      req.Amount,
		Currency:    req.Currency,
		Destination: req.Destination,
		CreatedAt:   now,
		UpdatedAt:   now,
		RequestID:   correlation.ID(ctx),
	}
	stored := false
	if st.ID != candidate {
		// We took over the reservation of a request that died. A ledger that
		// writes the record before completing the key may hold its record:
		// that withdrawal, with its times, is the answer to give and keep.
		if prior, err := s.cfg.Ledger.Get(ctx, userID, st.ID); err == nil {
			w, stored = prior, true
		} else if !errors.Is(err, ErrNotFound) {
			return Created{}, err
		}
	}
	if !stored {
		due, late := s.cfg.Rules.Due(req.When, now)
		if late != nil {
			// A new withdrawal at a time the clock refuses: the key goes
			// back, so the refusal leaves nothing behind.
			s.release(ctx, key, w.ID, false)
			return Created{}, late
		}
		w.DueAt = due
	}
	resp, err := EncodeCreated(w)
	if err != nil {
		return Created{}, err
	}
	err = s.cfg.Ledger.Create(ctx, w, key, resp)
	if errors.Is(err, ErrExists) {
		// The create landed but its reply was lost and the retry found it:
		// the key now holds the response.
		st, rerr := s.cfg.Ledger.Reserve(ctx, Reservation{Key: key, Fingerprint: fp, ID: w.ID,
			Now: now, LockUntil: now.Add(s.cfg.KeyLock), ExpiresAt: now.Add(s.cfg.KeyRetention)})
		switch {
		case rerr == nil && st.Phase == KeyCompleted && st.ID == w.ID:
			first, derr := DecodeCreated(st.Response, key)
			if derr != nil {
				return Created{}, derr
			}
			return Created{Withdrawal: first}, nil
		case rerr != nil:
			// The withdrawal may well exist: what failed is the read that
			// would tell. Say that (the client retries and is answered
			// the first response), never that the id was taken.
			err = fmt.Errorf("withdrawal: read the idempotency key after a create that may have landed: %w", rerr)
		}
	}
	if err != nil {
		s.release(ctx, key, w.ID, true)
		return Created{}, err
	}
	correlation.Logger(s.cfg.Logger, w.RequestID).Info("withdrawal scheduled",
		"withdrawal_id", w.ID, "due_at", clock.Format(w.DueAt))
	if s.cfg.OnScheduled != nil {
		s.cfg.OnScheduled(w.DueAt)
	}
	return Created{Withdrawal: w.AsCreated(w.DueAt)}, nil
}

// release gives back the reservation of key for id, so the client may
// retry at once; sent says a Create was sent for it (see Ledger.Release).
// Best effort, even when ctx is done: an unreleased reservation is taken
// over after its lock.
func (s *Service) release(ctx context.Context, key IdemKey, id string, sent bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := s.cfg.Ledger.Release(rctx, key, id, sent); err != nil {
		correlation.Logger(s.cfg.Logger, correlation.ID(ctx)).Warn("idempotency key not released",
			"withdrawal_id", id, "error", err)
	}
}

// Get returns the user's withdrawal id; someone else's is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID, id string) (Withdrawal, error) {
	if !plausibleID(id) {
		return Withdrawal{}, ErrNotFound
	}
	return s.cfg.Ledger.Get(ctx, userID, id)
}

// Cancel cancels the user's withdrawal id if it was not handed to the payout
// step yet; cancelling a cancelled withdrawal succeeds again.
func (s *Service) Cancel(ctx context.Context, userID, id string) (Withdrawal, error) {
	if !plausibleID(id) {
		return Withdrawal{}, ErrNotFound
	}
	return s.cfg.Ledger.Cancel(ctx, userID, id, s.cfg.Clock.Now().UTC())
}

// Page is one page of a user's withdrawals; Next is empty on the last page.
type Page struct {
	Items []Withdrawal
	Next  string
}

// Limits of List.
const (
	DefaultPageSize = 20
	MaxPageSize     = 100
)

// List returns a page of the user's withdrawals, newest first. cursor is the
// Next of the previous page, or empty.
func (s *Service) List(ctx context.Context, userID string, limit int, cursor string) (Page, error) {
	if limit < 1 || limit > MaxPageSize {
		return Page{}, validation.New("limit", "must lie within 1..%d", MaxPageSize)
	}
	after := ""
	if cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(cursor)
		if err != nil || !plausibleID(string(raw)) {
			return Page{}, validation.New("cursor", "is not a cursor this API returned")
		}
		after = string(raw)
	}
	items, err := s.cfg.Ledger.List(ctx, userID, limit+1, after)
	if err != nil {
		return Page{}, err
	}
	var p Page
	if len(items) > limit {
		items = items[:limit]
		p.Next = base64.RawURLEncoding.EncodeToString([]byte(items[limit-1].ID))
	}
	p.Items = items
	return p, nil
}

// plausibleID reports whether id could be one NewID made; anything else cannot
// name a withdrawal and is not worth a lookup.
func plausibleID(id string) bool {
	if !strings.HasPrefix(id, "wd_") {
		return false
	}
	_, err := ulid.ParseStrict(id[3:])
	return err == nil
}

// ByUser is the RescheduledBy of a reschedule the owner asked for.
const ByUser = "user"

// Reschedule moves the user's withdrawal id to the time to names (the rules
// of a create) if ifRevision (nil for any) is its revision and it was not
// handed to the payout step yet. A retrying one keeps its attempts: the
// new time replaces its retry time.
func (s *Service) Reschedule(ctx context.Context, userID, id string, to When, ifRevision *int64) (Withdrawal, error) {
	now := s.cfg.Clock.Now().UTC()
	verr := &validation.Error{}
	if to.Delay == nil && to.At.IsZero() {
		verr.Add("delay_seconds", "give delay_seconds or process_at")
	}
	s.cfg.Rules.CheckWhen(to, verr)
	if err := verr.Err(); err != nil {
		return Withdrawal{}, err
	}
	due, err := s.cfg.Rules.Due(to, now)
	if err != nil {
		return Withdrawal{}, err
	}
	if !plausibleID(id) {
		return Withdrawal{}, ErrNotFound
	}
	return s.reschedule(ctx, Reschedule{UserID: userID, ID: id, DueAt: due, Now: now, IfRevision: ifRevision, By: ByUser})
}

// RescheduleBy is the operator's reschedule of withdrawal id, whoever owns
// it, to due (the rules of process_at), with by and reason kept in the
// record.
func (s *Service) RescheduleBy(ctx context.Context, id string, due time.Time, by, reason string) (Withdrawal, error) {
	now := s.cfg.Clock.Now().UTC()
	due = due.UTC().Truncate(time.Millisecond)
	verr := &validation.Error{}
	if err := s.cfg.Rules.CheckDue(due, now, "due"); err != nil {
		verr = err.(*validation.Error)
	}
	if strings.TrimSpace(by) == "" || by == ByUser {
		verr.Add("by", "name the operator")
	}
	if strings.TrimSpace(reason) == "" {
		verr.Add("reason", "is required")
	}
	if err := verr.Err(); err != nil {
		return Withdrawal{}, err
	}
	w, err := s.cfg.Ledger.Find(ctx, id)
	if err != nil {
		return Withdrawal{}, err
	}
	return s.reschedule(ctx, Reschedule{UserID: w.UserID, ID: id, DueAt: due, Now: now, By: by, Reason: reason})
}

func (s *Service) reschedule(ctx context.Context, r Reschedule) (Withdrawal, error) {
	w, err := s.cfg.Ledger.Reschedule(ctx, r)
	if err != nil {
		return w, err
	}
	correlation.Logger(s.cfg.Logger, w.RequestID).Info("withdrawal rescheduled",
		"withdrawal_id", w.ID, "from", clock.Format(w.RescheduledFrom), "due_at", clock.Format(w.DueAt),
		"status", w.Status, "by", r.By, "reason", r.Reason)
	if s.cfg.OnScheduled != nil {
		s.cfg.OnScheduled(w.DueAt)
	}
	return w, nil
}

// JoinInvalid merges validation errors (of a body and a header, say) into
// one; any other error wins as it is.
func JoinInvalid(errs ...error) error {
	out := &validation.Error{}
	for _, err := range errs {
		var verr *validation.Error
		switch {
		case err == nil:
		case errors.As(err, &verr):
			out.Errors = append(out.Errors, verr.Errors...)
		default:
			return err
		}
	}
	return out.Err()
}
