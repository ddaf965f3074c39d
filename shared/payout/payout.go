// Package payout calls the payout provider (SPEC.md "Outbound contracts") and
// offers a simulated provider for the local stack.
package payout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/correlation"
	"github.com/hourglass/hourglass/shared/money"
	"github.com/hourglass/hourglass/shared/secrets"
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
	// Keys, if set, replaces Secret (PAYOUT_SIGNING_SECRET_ID): each call is
	// signed with its current key, and a call the provider refuses with 401
	// or 403 is sent once more, with the same idempotency key, if the secret
	// read again holds another key (a rotation).
	Keys secrets.Source
	// Timeout bounds one call; 0 means DefaultTimeout.
	Timeout time.Duration
	// HTTPClient makes the calls; nil means a fresh http.Client. It is copied
	// and the copy never follows redirects.
	HTTPClient *http.Client
	// Clock stamps signatures; nil means clock.System.
	Clock clock.Clock
	// NoLookup says the provider offers no status lookup (PAYOUT_LOOKUP=false):
	// Lookup then asks nothing. A provider without one may well answer 404
	// to any GET, which would otherwise read as "never received".
	NoLookup bool
}

// Client is the payout provider's HTTP client. It is safe for concurrent use.
type Client struct {
	endpoint *signedpost.Endpoint
	noLookup bool
}

// New checks cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	e, err := signedpost.New(signedpost.Options{
		Name:           "payout",
		Party:          "provider",
		URL:            cfg.URL,
		Secret:         cfg.Secret,
		Keys:           cfg.Keys,
		Timeout:        cfg.Timeout,
		DefaultTimeout: DefaultTimeout,
		HTTPClient:     cfg.HTTPClient,
		Clock:          cfg.Clock,
		UserAgent:      userAgent,
	})
	if err != nil {
		return nil, err
	}
	return &Client{endpoint: e, noLookup: cfg.NoLookup}, nil
}

// Error is a failed provider call. Status is the HTTP status, 0 if there was
// no answer. It wraps withdrawal.ErrPermanent when Permanent, else the network
// error if any (so errors.Is finds context.DeadlineExceeded).
type Error struct {
	Status    int
	Permanent bool
	// Unknown: no answer came after the request may have reached the
	// provider, or it answered that it is still processing the key (409),
	// so it may have paid (errors.Is withdrawal.ErrOutcomeUnknown).
	Unknown bool
	// Rejected: the provider refused our credentials or signature (401,
	// 403), not the payout (errors.Is withdrawal.ErrRejected).
	Rejected bool
	Msg      string
	Err      error
}

func (e *Error) Error() string { return "payout: " + e.Msg }

// Is lets errors.Is tell an unanswered call (withdrawal.ErrOutcomeUnknown)
// and a refusal of our credentials (withdrawal.ErrRejected) from a refusal
// of the payout.
func (e *Error) Is(target error) bool {
	return (e.Unknown && target == withdrawal.ErrOutcomeUnknown) || (e.Rejected && target == withdrawal.ErrRejected)
}

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
		Amount:       money.Format(w.Amount, w.Currency),
		Currency:     w.Currency,
		Destination:  w.Destination,
	})
	if err != nil {
		return "", &Error{Permanent: true, Msg: fmt.Sprintf("encode %s: %v", w.ID, err)}
	}
	ctx = bounded(correlation.With(ctx, w.RequestID))
	resp, err := c.endpoint.Post(ctx, body, w.ID)
	if err == nil && refused(resp.StatusCode) && c.endpoint.Rekeyed(ctx, resp) {
		// A 401 or 403 means the provider did not act on the request, so
		// sending it again under the same key cannot pay twice.
		resp, err = c.endpoint.Post(ctx, body, w.ID)
	}
	if errors.Is(err, signedpost.ErrTooLate) {
		return "", fmt.Errorf("payout: %w", withdrawal.ErrTooLate)
	}
	if err != nil {
		// Only a request that never reached the provider in full surely did
		// not pay; one written in full and not answered may have.
		var pe *signedpost.PostError
		unknown := !errors.As(err, &pe) || pe.Sent
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
	return "", classify(code, msg)
}

// classify reads a non-2xx answer to a payout request. 401 and 403 are
// about our credentials and 409 means the provider still processes the key
// (it may pay): neither is a verdict on the payout. 408 and 429 ask for a
// retry, 5xx is the provider's fault, 3xx means a misconfigured URL an
// operator can fix. Any other 4xx refuses the payout for good.
func classify(code int, msg string) *Error {
	e := &Error{Status: code, Msg: msg}
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		e.Rejected = true
	case code == http.StatusConflict:
		e.Unknown = true
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests:
	case code >= 400 && code <= 499:
		e.Permanent = true
	}
	return e
}

// Lookup asks the provider what became of w's payout: GET $PAYOUT_URL/{id},
// signed over the id. 200 {"status":"paid"|"failed"|"pending","payout_id"}
// is an answer, 404 means the provider never received the request; any
// other answer, or none, settles nothing (an error), and 405 or 501 mean the
// provider has no lookup (withdrawal.ErrNoLookup).
func (c *Client) Lookup(ctx context.Context, w withdrawal.Withdrawal) (withdrawal.Lookup, error) {
	if c.noLookup {
		return withdrawal.Lookup{}, fmt.Errorf("payout: %w (PAYOUT_LOOKUP=false)", withdrawal.ErrNoLookup)
	}
	if !validKey(w.ID) {
		return withdrawal.Lookup{}, fmt.Errorf("payout: withdrawal id %q cannot be looked up", w.ID)
	}
	ctx = bounded(correlation.With(ctx, w.RequestID))
	resp, err := c.endpoint.Get(ctx, w.ID)
	if err == nil && refused(resp.StatusCode) && c.endpoint.Rekeyed(ctx, resp) {
		resp, err = c.endpoint.Get(ctx, w.ID)
	}
	if errors.Is(err, signedpost.ErrTooLate) {
		return withdrawal.Lookup{}, fmt.Errorf("payout: look up: %w", withdrawal.ErrTooLate)
	}
	if err != nil {
		return withdrawal.Lookup{}, &Error{Msg: "look up payout: " + err.Error(), Err: err}
	}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound:
		return withdrawal.Lookup{State: withdrawal.LookupNotFound}, nil
	case code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented:
		return withdrawal.Lookup{}, fmt.Errorf("payout: provider answered %s to the lookup: %w", statusLine(code), withdrawal.ErrNoLookup)
	case code != http.StatusOK:
		msg := "lookup answered " + statusLine(code)
		if s := signedpost.Clean(resp.Text(), maxSnippet); s != "" {
			msg += ": " + s
		}
		return withdrawal.Lookup{}, &Error{Status: code, Msg: msg}
	}
	var answer struct {
		Status   string `json:"status"`
		PayoutID string `json:"payout_id"`
		Reason   string `json:"reason"`
	}
	if err := json.Unmarshal(resp.Body, &answer); err != nil {
		return withdrawal.Lookup{}, &Error{Status: resp.StatusCode, Msg: "lookup answer is not JSON: " + signedpost.Clean(resp.Text(), maxSnippet)}
	}
	lk := withdrawal.Lookup{Reason: signedpost.Clean(answer.Reason, maxSnippet)}
	if validPayoutID(answer.PayoutID) {
		lk.PayoutID = answer.PayoutID
	}
	switch answer.Status {
	case "paid":
		lk.State = withdrawal.LookupPaid
	case "failed":
		lk.State = withdrawal.LookupFailed
	case "pending":
		lk.State = withdrawal.LookupPending
	default:
		return withdrawal.Lookup{}, &Error{Status: resp.StatusCode,
			Msg: fmt.Sprintf("lookup answered status %q, not paid, failed or pending", signedpost.Clean(answer.Status, maxSnippet))}
	}
	return lk, nil
}

// bounded carries the payout attempt's deadline (withdrawal.WithCallDeadline)
// over to the endpoint: no call of the attempt is signed past it or runs
// beyond it.
func bounded(ctx context.Context) context.Context {
	if t, ok := withdrawal.CallDeadline(ctx); ok {
		return signedpost.WithNotAfter(ctx, t)
	}
	return ctx
}

// refused reports whether an answer refused our credentials or signature.
func refused(code int) bool { return code == http.StatusUnauthorized || code == http.StatusForbidden }

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
