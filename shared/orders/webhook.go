package orders

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signedpost"
)

var _ Publisher = (*Webhook)(nil)

// DefaultWebhookTimeout bounds one webhook call when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// URL receives the POST (ORDERS_WEBHOOK_URL).
	URL string
	// Secret signs every body (ORDERS_SIGNING_SECRET).
	Secret []byte
	// Keys, if set, replaces Secret (ORDERS_SIGNING_SECRET_ID): each event
	// is signed with its current key, and one refused with 401 or 403 is
	// sent once more if the secret read again holds another key.
	Keys secrets.Source
	// Timeout bounds one call; 0 means DefaultWebhookTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
}

// Webhook POSTs each event, signed (X-Hourglass-Signature) and with its Key
// as Idempotency-Key, to the downstream URL. Anything but a 2xx answer is an
// error, so the event is sent again.
type Webhook struct {
	endpoint *signedpost.Endpoint
}

// NewWebhook checks cfg and returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	e, err := signedpost.New(signedpost.Options{
		Name:           "orders",
		Party:          "webhook",
		URL:            cfg.URL,
		Secret:         cfg.Secret,
		Keys:           cfg.Keys,
		Timeout:        cfg.Timeout,
		DefaultTimeout: DefaultWebhookTimeout,
		HTTPClient:     cfg.HTTPClient,
		Clock:          cfg.Clock,
	})
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
