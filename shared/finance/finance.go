// Package finance tells finance of processed payouts. Its adapters implement
// withdrawal.Notifier: Log for the local stack, Webhook for FINANCE_WEBHOOK_URL
// and SNS for AWS. Every one sends the same JSON (withdrawal.Processed), and
// finance gets each message at least once, under its de-duplication key
// DedupKey: "<withdrawal id>:<status>". Paid, failed and returned are three
// keys, so a return is never taken for a repeat of the payment before it;
// a repeat of one key is a duplicate.
package finance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// DedupKey is m's de-duplication key, "<withdrawal id>:<status>", the one
// every adapter sends: SNS's MessageDeduplicationId and dedup_key
// attribute, the webhook's Idempotency-Key, the log line's dedup_key. The
// status is part of it because one payout has more than one outcome to
// tell (paid, then returned), and a receiver that de-duplicates by key
// would drop the second if the id alone were the key.
func DedupKey(m withdrawal.Processed) string {
	return m.WithdrawalID + ":" + string(m.Status)
}

// encode is the one wire form of a message, shared by every adapter.
func encode(m withdrawal.Processed) ([]byte, error) {
	if err := check(m); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("finance: encode %s: %w", DedupKey(m), err)
	}
	return b, nil
}

// check refuses a message whose key would be incomplete: without its id and
// its status finance cannot de-duplicate it.
func check(m withdrawal.Processed) error {
	if m.WithdrawalID == "" {
		return errors.New("finance: message without withdrawal id")
	}
	if m.Status == "" {
		return fmt.Errorf("finance: message about %s without status", m.WithdrawalID)
	}
	return nil
}

// Both tells every notifier of each message, in order: the topic (and its
// durable queue) and finance's webhook when a deployment has both. A message
// counts as delivered only when all took it; after a failure the job is
// retried and the ones that took it hear of it again, which its DedupKey
// lets them de-duplicate.
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
