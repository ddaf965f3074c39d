package payout

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Provider = (*Simulated)(nil)

// Simulated stands in for the provider on the local stack (no PAYOUT_URL):
// it pays at once and logs the payout.
type Simulated struct {
	// Logger receives one line per payout; nil means slog.Default.
	Logger *slog.Logger

	paid sync.Map // withdrawal id -> payout id, what Lookup answers
}

// Pay pays w at once. The payout id derives from the withdrawal id, so asking
// again answers the same, as an idempotent provider would.
func (s *Simulated) Pay(ctx context.Context, w withdrawal.Withdrawal) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", &Error{Msg: fmt.Sprintf("simulated payout of %s: %v", w.ID, err), Err: err}
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	// Not the destination: logs carry no bank data.
	correlation.Logger(log, w.RequestID).InfoContext(ctx, "simulated payout",
		"withdrawal_id", w.ID,
		"amount", money.Format(w.Amount, w.Currency),
		"currency", w.Currency)
	s.paid.Store(w.ID, "sim_"+w.ID)
	return "sim_" + w.ID, nil
}

// Lookup answers what this process paid: paid, or never received.
func (s *Simulated) Lookup(ctx context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	if err := ctx.Err(); err != nil {
		return withdrawal.Lookup{}, &Error{Msg: fmt.Sprintf("simulated lookup of %s: %v", w.ID, err), Err: err}
	}
	if id, ok := s.paid.Load(w.ID); ok {
		return withdrawal.Lookup{State: withdrawal.LookupPaid, PayoutID: id.(string)}, nil
	}
	return withdrawal.Lookup{State: withdrawal.LookupNotFound}, nil
}
