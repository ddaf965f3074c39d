package finance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Notifier = (*Webhook)(nil)

// DefaultWebhookTimeout bounds one webhook call when WebhookConfig.Timeout is 0.
const DefaultWebhookTimeout = 10 * time.Second

// maxResponse bounds how much of a response is read: finance's answer only
// matters for the error text.
const maxResponse = 64 << 10

// maxErrorBody bounds how much of a response body goes into an error.
const maxErrorBody = 512

// WebhookConfig configures a Webhook.
type WebhookConfig struct {
	// URL receives the POST (FINANCE_WEBHOOK_URL).
	URL string
	// Secret signs every body (FINANCE_SIGNING_SECRET).
	Secret []byte
	// Timeout bounds one call; 0 means DefaultWebhookTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. Its redirect
	// policy is overridden: redirects are never followed.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
}

// Webhook POSTs each message, signed, to finance's URL. Anything but a 2xx
// answer is an error, so the caller retries.
type Webhook struct {
	url     string
	where   string // url without credentials or query, for error text
	secret  []byte
	timeout time.Duration
	client  *http.Client
	clock   clock.Clock
}

// NewWebhook checks cfg and returns a Webhook.
func NewWebhook(cfg WebhookConfig) (*Webhook, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, errors.New("finance: webhook url does not parse")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("finance: webhook url %q is not an absolute http(s) url", redact(u))
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("finance: webhook needs a signing secret")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("finance: negative webhook timeout %s", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultWebhookTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	client := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient // a copy: the caller's client keeps its policy
		client = &c
	}
	// A redirect would resend a signed body to a URL finance never gave us.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Webhook{
		url:     u.String(),
		where:   redact(u),
		secret:  bytes.Clone(cfg.Secret),
		timeout: cfg.Timeout,
		client:  client,
		clock:   cfg.Clock,
	}, nil
}

// Notify POSTs m and reports whether finance accepted it (2xx).
func (h *Webhook) Notify(ctx context.Context, m withdrawal.Processed) error {
	body, err := encode(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("finance: webhook %s: %w", m.WithdrawalID, err)
	}
	sig := signature.Sign(h.secret, h.clock.Now(), body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.WithdrawalID)
	req.Header.Set(signature.Header, sig)

	resp, err := h.client.Do(req)
	if err != nil {
		// *url.Error repeats the full URL; name the redacted one instead.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("finance: webhook %s: post to %s: %w", m.WithdrawalID, h.where, err)
	}
	defer resp.Body.Close()
	// Read (a bounded part of) the body so the connection can be reused.
	got, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	msg := fmt.Sprintf("finance: webhook %s: %s answered %s", m.WithdrawalID, h.where, resp.Status)
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		msg += fmt.Sprintf(" (redirect to %q not followed)", loc)
	}
	if snippet := h.scrub(string(got), sig); snippet != "" {
		msg += fmt.Sprintf(": %q", snippet)
	} else if readErr != nil {
		msg += fmt.Sprintf(" (reading body: %v)", readErr)
	}
	return errors.New(msg)
}

// scrub trims a response body for an error and removes anything secret a
// server might echo back (some echo request headers).
func (h *Webhook) scrub(s, sig string) string {
	s = strings.TrimSpace(s)
	secrets := []string{sig, string(h.secret)}
	if _, mac, ok := strings.Cut(sig, "v1="); ok {
		secrets = append(secrets, mac)
	}
	for _, x := range secrets {
		if x != "" {
			s = strings.ReplaceAll(s, x, "[redacted]")
		}
	}
	if len(s) > maxErrorBody {
		s = strings.ToValidUTF8(s[:maxErrorBody], "") + "…"
	}
	return s
}

// redact is u without user info, query or fragment, which may hold tokens.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}
