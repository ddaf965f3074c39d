package orders

import (
	"context"
	"fmt"

	"github.com/hourglass/hourglass/shared/snstopic"
)

var _ Publisher = (*SNS)(nil)

// SNS publishes each event to the orders topic in AWS, with the message
// attributes type and dedup_key (Key) for subscribers to filter and
// de-duplicate on.
type SNS struct {
	topic *snstopic.Topic
}

// NewSNS returns an SNS publishing to topicARN through api.
func NewSNS(api snstopic.API, topicARN string) (*SNS, error) {
	t, err := snstopic.New("orders", api, topicARN)
	if err != nil {
		return nil, err
	}
	return &SNS{topic: t}, nil
}

// Publish publishes e. On a FIFO topic the order id is the group (one
// order's events stay in order) and Key the de-duplication id.
func (s *SNS) Publish(ctx context.Context, e Event) error {
	body, err := encode(e)
	if err != nil {
		return err
	}
	err = s.topic.Publish(ctx, snstopic.Message{
		Body:       body,
		Attributes: map[string]string{"type": e.Type, "dedup_key": e.Key()},
		Group:      e.OrderID,
		Dedup:      e.Key(),
	})
	if err != nil {
		return fmt.Errorf("orders: publish %s to sns: %w", e.Key(), err)
	}
	return nil
}
