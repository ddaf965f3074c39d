package finance

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglass/hourglass/shared/signedpost"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*Webhook)(nil)

// DefaultWebhookTimeout bounds one webhook call when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// WebhookConfig configures a Webhook: the URL is FINANCE_WEBHOOK_URL, the
// secret FINANCE_SIGNING_SECRET (or its Keys, FINANCE_SIGNING_SECRET_ID), and a
// zero Timeout means DefaultWebhookTimeout.
type WebhookConfig = signedpost.WebhookConfig

// Webhook POSTs each message, signed, to finance's URL, with DedupKey as
// its Idempotency-Key. Anything but a 2xx answer is an error, so the caller
// retries.
type Webhook struct {
	endpoint *signedpost.Endpoint
}

// NewWebhook checks cfg and returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	e, err := cfg.Webhook("finance", DefaultWebhookTimeout)
	if err != nil {
		return nil, err
	}
	return &Webhook{endpoint: e}, nil
}

// Notify POSTs m and reports whether finance accepted it (2xx).
func (h *Webhook) Notify(ctx context.Context, m withdrawal.Processed) error {
	body, err := encode(m)
	if err != nil {
		return err
	}
	key := DedupKey(m)
	if err := h.endpoint.Deliver(ctx, body, key); err != nil {
		return fmt.Errorf("finance: webhook %s: %w", key, err)
	}
	return nil
}
