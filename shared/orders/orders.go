// Package orders tells downstream systems (stock, SMS, shipping) of each
// flash-sale order's life: order.created, order.paid, order.expired and
// payment.refund_required. Events go out at least once; a subscriber
// de-duplicates them by Key (the order id and the event's type, and for a
// refund the payment's event id): an order has at most one event of each
// other type.
package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
)

// Event types.
const (
	Created        = "order.created"
	Paid           = "order.paid"
	Expired        = "order.expired"
	RefundRequired = "payment.refund_required"
)

// Event is one step of an order's life, in the one JSON form every
// publisher sends.
type Event struct {
	Type       string `json:"type"`
	OrderID    string `json:"order_id"`
	PurchaseID string `json:"purchase_id"`
	ItemID     string `json:"item_id"`
	UserID     string `json:"user_id"`
	Quantity   int    `json:"quantity"`
	// Amount is a decimal string ("" for an item sold without a price);
	// Currency its ISO 4217 code.
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	// At is when the step happened (RFC 3339, UTC, milliseconds).
	At string `json:"at"`
	// PaymentEventID is the payment provider's event of a
	// payment.refund_required (empty otherwise): an order may need more than
	// one refund, one per payment that came too late or twice.
	PaymentEventID string `json:"payment_event_id,omitempty"`
}

// Key is the event's de-duplication key: "<order id>:<type>", and
// ":<payment event id>" for a refund, so that two payments to refund are
// two events, never one de-duplicated away.
func (e Event) Key() string {
	if e.PaymentEventID != "" {
		return e.OrderID + ":" + e.Type + ":" + e.PaymentEventID
	}
	return e.OrderID + ":" + e.Type
}

// Publisher sends events. A nil error means the event was accepted by the
// channel; an error means it must be sent again (it may have gone out).
type Publisher interface {
	Publish(ctx context.Context, e Event) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, e Event) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, e Event) error { return f(ctx, e) }

// At formats t as an Event's At (the API's time layout).
func At(t time.Time) string { return clock.Format(t) }

// encode is the one wire form of an event, shared by every publisher.
func encode(e Event) ([]byte, error) {
	// Without both a subscriber cannot de-duplicate the event.
	if e.OrderID == "" || e.Type == "" {
		return nil, fmt.Errorf("orders: event %q of order %q: an event needs an order id and a type", e.Type, e.OrderID)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("orders: encode %s: %w", e.Key(), err)
	}
	return b, nil
}

// All tells every publisher of each event, in order: the topic (and its
// durable queue) and the webhook when a deployment has both. An event counts
// as published only when all took it; after a failure it is sent again and
// the ones that took it hear of it again, which Key lets them de-duplicate.
type All []Publisher

// Publish implements Publisher.
func (a All) Publish(ctx context.Context, e Event) error {
	for _, p := range a {
		if err := p.Publish(ctx, e); err != nil {
			return err
		}
	}
	return nil
}
