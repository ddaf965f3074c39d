// Package finance tells finance of processed payouts. Its adapters implement
// withdrawal.Notifier: Log for the local stack, Webhook for FINANCE_WEBHOOK_URL
// and SNS for AWS. Every one sends the same JSON (withdrawal.Processed), and
// finance gets each message at least once: the withdrawal id is its
// de-duplication key.
package finance

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// encode is the one wire form of a message, shared by every adapter.
func encode(m withdrawal.Processed) ([]byte, error) {
	// Without its id finance cannot de-duplicate the message.
	if m.WithdrawalID == "" {
		return nil, errors.New("finance: message without withdrawal id")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("finance: encode %s: %w", m.WithdrawalID, err)
	}
	return b, nil
}
