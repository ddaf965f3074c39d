// Package payout calls the payout provider (SPEC.md "Outbound contracts") and
// offers a simulated provider for the local stack.
package payout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Provider = (*Client)(nil)

// DefaultTimeout bounds one provider call when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Second

const (
	// maxBody bounds what is read of a response (and again what is drained
	// after it): a provider's answer is small, a broken one may be endless.
	maxBody = 64 << 10
	// maxSnippet bounds the part of a body quoted in an error.
	maxSnippet = 200
	userAgent  = "hourglass/1"
)

// Config configures a Client.
type Config struct {
	// URL receives the POST (PAYOUT_URL): http or https, with a host.
	URL string
	// Secret signs every body (PAYOUT_SIGNING_SECRET).
	Secret []byte
	// Timeout bounds one call; 0 means DefaultTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
}

// Client is the payout provider's HTTP client. It is safe for concurrent use.
type Client struct {
	url     string
	where   string // url without credentials, query or fragment, for errors
	secret  []byte
	timeout time.Duration
	client  *http.Client
	clock   clock.Clock
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		// url's error repeats the input, which may hold credentials.
		return nil, errors.New("payout: provider url does not parse")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return nil, fmt.Errorf("payout: provider url %q is not an absolute http(s) url with a host", redact(u))
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("payout: provider needs a signing secret")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("payout: negative provider timeout %s", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	client := &http.Client{}
	if cfg.HTTPClient != nil {
		c := *cfg.HTTPClient // a copy: the caller's client keeps its policy
		client = &c
	}
	// A redirect would resend a signed payout to a URL we were never given.
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{
		url:     u.String(),
		where:   redact(u),
		secret:  bytes.Clone(cfg.Secret),
		timeout: cfg.Timeout,
		client:  client,
		clock:   cfg.Clock,
	}, nil
}

// Error is a failed provider call. Status is the HTTP status, 0 if there was
// no answer. It wraps withdrawal.ErrPermanent when Permanent, else the network
// error if any (so errors.Is finds context.DeadlineExceeded).
type Error struct {
	Status    int
	Permanent bool
	Msg       string
	Err       error
}

func (e *Error) Error() string { return "payout: " + e.Msg }

// Unwrap lets errors.Is(err, withdrawal.ErrPermanent) decide on retries.
func (e *Error) Unwrap() error {
	if e.Permanent {
		return withdrawal.ErrPermanent
	}
	return e.Err
}

type request struct {
	WithdrawalID string `json:"withdrawal_id"`
	UserID       string `json:"user_id"`
	Amount       string `json:"amount"`
	Currency     string `json:"currency"`
	Destination  string `json:"destination"`
}

// Pay asks the provider to pay w. The withdrawal id is the idempotency key,
// so calling again after any error cannot pay twice.
func (c *Client) Pay(ctx context.Context, w withdrawal.Withdrawal) (string, error) {
	if !validKey(w.ID) {
		// Without a usable idempotency key a retry could pay twice.
		return "", &Error{Permanent: true, Msg: fmt.Sprintf("withdrawal id %q is not a valid idempotency key", w.ID)}
	}
	body, err := json.Marshal(request{
		WithdrawalID: w.ID,
		UserID:       w.UserID,
		Amount:       withdrawal.FormatAmount(w.Amount, w.Currency),
		Currency:     w.Currency,
		Destination:  w.Destination,
	})
	if err != nil {
		return "", &Error{Permanent: true, Msg: fmt.Sprintf("encode %s: %v", w.ID, err)}
	}
	callCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return "", &Error{Msg: fmt.Sprintf("build request for %s: %v", w.ID, err), Err: err}
	}
	sig := signature.Sign(c.secret, c.clock.Now(), body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", w.ID)
	req.Header.Set(signature.Header, sig)
	req.Header.Set("User-Agent", userAgent)

	resp, err := c.client.Do(req)
	if err != nil {
		// *url.Error repeats the full URL; name the redacted one instead.
		inner := err
		var ue *url.Error
		if errors.As(err, &ue) {
			inner = ue.Err
		}
		msg := fmt.Sprintf("call provider: post %s: %v", c.where, inner)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil { // our timeout, not the caller's
			msg = fmt.Sprintf("call provider: post %s: no answer within %s: %v", c.where, c.timeout, inner)
		}
		return "", &Error{Msg: msg, Err: err}
	}
	got, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	drain(resp.Body)

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		// Paid: the id is a courtesy, its absence or a broken body changes nothing.
		var answer struct {
			PayoutID string `json:"payout_id"`
		}
		if json.Unmarshal(got, &answer) != nil {
			return "", nil
		}
		return answer.PayoutID, nil
	}
	msg := "provider answered " + statusLine(code)
	if code >= 300 && code <= 399 {
		if loc := resp.Header.Get("Location"); loc != "" {
			msg += fmt.Sprintf(" (redirect to %q not followed)", clean(loc, maxSnippet))
		}
	}
	if s := clean(c.scrub(string(got), sig), maxSnippet); s != "" {
		msg += ": " + s
	}
	return "", &Error{Status: code, Permanent: permanent(code), Msg: msg}
}

// permanent tells a refusal no retry can change (a 4xx) from a failure
// worth retrying: 408 and 429 ask for a retry, 5xx is the provider's fault,
// 3xx means a misconfigured URL an operator can fix.
func permanent(code int) bool {
	return code >= 400 && code <= 499 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
}

func statusLine(code int) string {
	if text := http.StatusText(code); text != "" {
		return fmt.Sprintf("%d %s", code, text)
	}
	return fmt.Sprint(code)
}

// drain reads what is left of a body, within bounds, so the connection can be
// reused; past the bound, closing drops the connection instead.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxBody))
	_ = body.Close()
}

// scrub removes what a provider might echo back of the request's secrets
// (some echo headers in error bodies).
func (c *Client) scrub(s, sig string) string {
	secrets := []string{sig, string(c.secret)}
	if _, mac, ok := strings.Cut(sig, "v1="); ok {
		secrets = append(secrets, mac)
	}
	for _, x := range secrets {
		s = strings.ReplaceAll(s, x, "[redacted]")
	}
	return s
}

// clean makes untrusted text safe for one log line: at most n bytes of valid
// UTF-8, line breaks and tabs as spaces, other control and format characters
// (escape sequences, bidi overrides) dropped.
func clean(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case unicode.In(r, unicode.Cc, unicode.Cf):
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// validKey reports whether id can be sent as a header value as is.
func validKey(id string) bool {
	if id == "" {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] >= 0x7f {
			return false
		}
	}
	return true
}

// redact is u without user info, query or fragment, which may hold tokens.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}
