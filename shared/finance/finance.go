// Package finance tells finance of processed payouts. Its adapters implement
// withdrawal.Notifier: Log for the local stack, Webhook for FINANCE_WEBHOOK_URL
// and SNS for AWS. Every one sends the same JSON (withdrawal.Processed), and
// finance gets each message at least once: the withdrawal id is its
// de-duplication key.
package finance

import (
	"context"
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

// Both tells every notifier of each message, in order: the topic (and its
// durable queue) and finance's webhook when a deployment has both. A message
// counts as delivered only when all took it; after a failure the job is
// retried and the ones that took it hear of it again, which the withdrawal
// id lets them de-duplicate.
type Both []withdrawal.Notifier

// Notify implements withdrawal.Notifier.
func (b Both) Notify(ctx context.Context, m withdrawal.Processed) error {
	for _, n := range b {
		if err := n.Notify(ctx, m); err != nil {
			return err
		}
	}
	return nil
}
