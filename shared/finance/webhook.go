package finance

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signedpost"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*Webhook)(nil)

// DefaultWebhookTimeout bounds one webhook call when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// URL receives the POST (FINANCE_WEBHOOK_URL).
	URL string
	// Secret signs every body (FINANCE_SIGNING_SECRET).
	Secret []byte
	// Keys, if set, replaces Secret (FINANCE_SIGNING_SECRET_ID): each message
	// is signed with its current key (finance accepts both keys while it
	// rotates), and one refused with 401 or 403 is sent once more if the
	// secret read again holds another key.
	Keys secrets.Source
	// Timeout bounds one call; 0 means DefaultWebhookTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
}

// Webhook POSTs each message, signed, to finance's URL. Anything but a 2xx
// answer is an error, so the caller retries.
type Webhook struct {
	endpoint *signedpost.Endpoint
}

// NewWebhook checks cfg and returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	e, err := signedpost.New(signedpost.Options{
		Name:           "finance",
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

// Notify POSTs m and reports whether finance accepted it (2xx).
func (h *Webhook) Notify(ctx context.Context, m withdrawal.Processed) error {
	body, err := encode(m)
	if err != nil {
		return err
	}
	if err := h.endpoint.Deliver(ctx, body, m.WithdrawalID); err != nil {
		return fmt.Errorf("finance: webhook %s: %w", m.WithdrawalID, err)
	}
	return nil
}
