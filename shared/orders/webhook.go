package orders

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass/shared/signedpost"
)

var _ Publisher = (*Webhook)(nil)

// DefaultWebhookTimeout bounds one webhook call when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// WebhookConfig configures a Webhook: the URL is ORDERS_WEBHOOK_URL, the
// secret ORDERS_SIGNING_SECRET (or its Keys, ORDERS_SIGNING_SECRET_ID), and a
// zero Timeout means DefaultWebhookTimeout.
type WebhookConfig = signedpost.WebhookConfig

// Webhook POSTs each event, signed (X-Hourglass-Signature) and with its Key
// as Idempotency-Key, to the downstream URL. Anything but a 2xx answer is an
// error, so the event is sent again.
type Webhook struct {
	endpoint *signedpost.Endpoint
}

// NewWebhook checks cfg and returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	e, err := cfg.Webhook("orders", DefaultWebhookTimeout)
	if err != nil {
		return nil, err
	}
	return &Webhook{endpoint: e}, nil
}

// Publish POSTs e and reports whether the receiver accepted it (2xx).
func (h *Webhook) Publish(ctx context.Context, e Event) error {
	body, err := encode(e)
	if err != nil {
		return err
	}
	if err := h.endpoint.Deliver(ctx, body, e.Key()); err != nil {
		return fmt.Errorf("orders: webhook %s: %w", e.Key(), err)
	}
	return nil
}
