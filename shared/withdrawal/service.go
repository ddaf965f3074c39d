package withdrawal

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
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

// Created is the answer to a create: the response body to send, which for a
// replay is the very body the first request got.
type Created struct {
	ID       string
	Body     []byte
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

// Create validates a request and, unless its idempotency key says otherwise,
// stores and schedules a new withdrawal.
func (s *Service) Create(ctx context.Context, userID, idemKey string, body []byte) (Created, error) {
	now := s.cfg.Clock.Now().UTC()
	req, err := s.cfg.Rules.Parse(body, now)
	if !ValidKey(idemKey) {
		verr := validation.New("Idempotency-Key", "header is required: 1 to 255 printable ASCII characters")
		var bodyErr *validation.Error
		if errors.As(err, &bodyErr) {
			verr.Errors = append(verr.Errors, bodyErr.Errors...)
		}
		return Created{}, verr
	}
	if err != nil {
		return Created{}, err
	}
	key := IdemKey{UserID: userID, Key: idemKey, Shard: s.cfg.ShardFor(userID)}
	candidate := NewID(now)
	st, err := s.cfg.Ledger.Reserve(ctx, Reservation{
		Key:         key,
		Fingerprint: req.Fingerprint,
		ID:          candidate,
		Now:         now,
		LockUntil:   now.Add(s.cfg.KeyLock),
		ExpiresAt:   now.Add(s.cfg.KeyRetention),
	})
	if err != nil {
		return Created{}, err
	}
	if st.Phase != KeyAcquired && st.Fingerprint != req.Fingerprint {
		return Created{}, ErrIdempotencyConflict
	}
	switch st.Phase {
	case KeyCompleted:
		return Created{ID: st.ID, Body: st.Response, Replayed: true}, nil
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
		DueAt:       req.DueAt,
		CreatedAt:   now,
		UpdatedAt:   now,
		RequestID:   correlation.ID(ctx),
	}
	if st.ID != candidate {
		// We took over the reservation of a request that died. A ledger that
		// writes the record before completing the key may hold its record:
		// that withdrawal, with its times, is the answer to give and keep.
		if prior, err := s.cfg.Ledger.Get(ctx, userID, st.ID); err == nil {
			w = prior
		} else if !errors.Is(err, ErrNotFound) {
			return Created{}, err
		}
	}
	resp, err := json.Marshal(w.View())
	if err != nil {
		return Created{}, fmt.Errorf("withdrawal: encode response: %w", err)
	}
	err = s.cfg.Ledger.Create(ctx, w, key, resp)
	if errors.Is(err, ErrExists) {
		// The create landed but its reply was lost and the retry found it:
		// the key now holds the response.
		if st, rerr := s.cfg.Ledger.Reserve(ctx, Reservation{Key: key, Fingerprint: req.Fingerprint, ID: w.ID,
			Now: now, LockUntil: now.Add(s.cfg.KeyLock), ExpiresAt: now.Add(s.cfg.KeyRetention)}); rerr == nil &&
			st.Phase == KeyCompleted && st.ID == w.ID {
			return Created{ID: w.ID, Body: st.Response}, nil
		}
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.cfg.Ledger.Release(rctx, key, w.ID)
		return Created{}, err
	}
	correlation.Logger(s.cfg.Logger, w.RequestID).Info("withdrawal scheduled",
		"withdrawal_id", w.ID, "due_at", clock.Format(w.DueAt))
	if s.cfg.OnScheduled != nil {
		s.cfg.OnScheduled(w.DueAt)
	}
	return Created{ID: w.ID, Body: resp}, nil
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
