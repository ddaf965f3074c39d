package finance

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass/shared/snstopic"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*SNS)(nil)

// SNSPublisher is the part of *sns.Client that SNS uses.
type SNSPublisher = snstopic.API

// SNS publishes each message to finance's topic in AWS. Subscribers can filter
// on the message attributes type, status and withdrawal_id, and de-duplicate
// on dedup_key (DedupKey), which a standard topic carries too.
type SNS struct {
	topic *snstopic.Topic
}

// NewSNS returns an SNS publishing to topicARN through api.
func NewSNS(api SNSPublisher, topicARN string) (*SNS, error) {
	t, err := snstopic.New("finance", api, topicARN)
	if err != nil {
		return nil, err
	}
	return &SNS{topic: t}, nil
}

// Notify publishes m. On a FIFO topic the withdrawal id is the group (one
// withdrawal's messages stay in order) and DedupKey the de-duplication id,
// so a return published within the topic's five-minute window after the
// payment is delivered, not dropped as its duplicate.
func (s *SNS) Notify(ctx context.Context, m withdrawal.Processed) error {
	body, err := encode(m)
	if err != nil {
		return err
	}
	key := DedupKey(m)
	err = s.topic.Publish(ctx, snstopic.Message{
		Body: body,
		Attributes: map[string]string{
			"type":          m.Type,
			"status":        string(m.Status),
			"withdrawal_id": m.WithdrawalID,
			"dedup_key":     key,
		},
		Group: m.WithdrawalID,
		Dedup: key,
	})
	if err != nil {
		return fmt.Errorf("finance: publish %s to sns: %w", key, err)
	}
	return nil
}
