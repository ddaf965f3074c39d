package finance

import (
	"testing"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// message is a finance message as the payout step builds it.
func message(t *testing.T, id string) withdrawal.Processed {
	t.Helper()
	return withdrawal.Processed{
		Type:         withdrawal.ProcessedType,
		WithdrawalID: id,
		UserID:       "user-42",
		Status:       withdrawal.Paid,
		Amount:       "125.50",
		Currency:     "EUR",
		Destination:  "DE89370400440532013000",
		PayoutID:     "po_123",
		Attempts:     2,
		ProcessedAt:  "2025-01-02T03:04:05.678Z",
	}
}
