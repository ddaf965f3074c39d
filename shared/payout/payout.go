// Package payout calls the payout provider (SPEC.md "Outbound contracts") and
// offers a simulated provider for the local stack.
package payout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signedpost"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var _ withdrawal.Provider = (*Client)(nil)

// DefaultTimeout bounds one provider call when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Second

const (
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
	endpoint *signedpost.Endpoint
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	e, err := signedpost.New(signedpost.Options{
		Name:           "payout",
		Party:          "provider",
		URL:            cfg.URL,
		Secret:         cfg.Secret,
		Timeout:        cfg.Timeout,
		DefaultTimeout: DefaultTimeout,
		HTTPClient:     cfg.HTTPClient,
		Clock:          cfg.Clock,
		UserAgent:      userAgent,
	})
	if err != nil {
		return nil, err
	}
	return &Client{endpoint: e}, nil
}

// Error is a failed provider call. Status is the HTTP status, 0 if there was
// no answer. It wraps withdrawal.ErrPermanent when Permanent, else the network
// error if any (so errors.Is finds context.DeadlineExceeded).
type Error struct {
	Status    int
	Permanent bool
	// Unknown: no answer came after the request may have reached the
	// provider, so it may have paid (errors.Is withdrawal.ErrOutcomeUnknown).
	Unknown bool
	Msg     string
	Err     error
}

func (e *Error) Error() string { return "payout: " + e.Msg }

// Is lets errors.Is(err, withdrawal.ErrOutcomeUnknown) tell an unanswered
// call from a refusal.
func (e *Error) Is(target error) bool { return e.Unknown && target == withdrawal.ErrOutcomeUnknown }

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
	resp, err := c.endpoint.Post(ctx, body, w.ID)
	if err != nil {
		// Only a call that never connected surely did not pay.
		var op *net.OpError
		unknown := !(errors.As(err, &op) && op.Op == "dial")
		return "", &Error{Msg: "call provider: " + err.Error(), Err: err, Unknown: unknown}
	}

	code := resp.StatusCode
	if code >= 200 && code <= 299 {
		// Paid: the id is a courtesy, its absence or a broken body changes nothing.
		var answer struct {
			PayoutID string `json:"payout_id"`
		}
		if json.Unmarshal(resp.Body, &answer) != nil || !validPayoutID(answer.PayoutID) {
			return "", nil
		}
		return answer.PayoutID, nil
	}
	msg := "provider answered " + statusLine(code)
	if loc := resp.Redirect(); loc != "" {
		msg += fmt.Sprintf(" (redirect to %q not followed)", signedpost.Clean(loc, maxSnippet))
	}
	if s := signedpost.Clean(resp.Text(), maxSnippet); s != "" {
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

// MaxPayoutID bounds the provider's payout id that is kept.
const MaxPayoutID = 255

// validPayoutID reports whether the provider's payout id is fit to keep: it
// goes to the ledger, to finance and into logs, so an id of control or
// format characters (terminal escapes, bidi overrides), broken UTF-8 or
// unbounded length is dropped (the payout stands; only its reference is
// lost).
func validPayoutID(id string) bool {
	return len(id) <= MaxPayoutID && utf8.ValidString(id) && !strings.ContainsFunc(id, func(r rune) bool {
		return unicode.In(r, unicode.Cc, unicode.Cf) || r == utf8.RuneError
	})
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
