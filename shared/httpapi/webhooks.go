package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// PayoutWebhooks serves POST /v1/webhooks/payouts: the payout provider's
// callbacks with a payout's final status. The route has no user identity:
// the signature (X-Hourglass-Signature with PAYOUT_WEBHOOK_SECRET, signed
// within the last 5 minutes) is the authentication.
type PayoutWebhooks struct {
	Service *withdrawal.Service
	Secret  []byte
	// Keys, if set, replaces Secret (PAYOUT_WEBHOOK_SECRET_ID): a signature
	// made with its current or previous key is accepted, and one matching
	// neither makes it read the secret again before the callback is refused,
	// so a key the provider rotated to is taken at once.
	Keys  secrets.Source
	Clock clock.Clock
	// Limiter, if set, rate-limits callbacks per source address.
	Limiter *ratelimit.Limiter
}

// WebhookPath is the route of the provider's callbacks.
const WebhookPath = "/v1/webhooks/payouts"

// Register adds the callback route to rt.
func (h PayoutWebhooks) Register(rt *Router) {
	rt.Handle(http.MethodPost, WebhookPath, Public, true, rt.Limited(h.Limiter, ratelimit.Webhook, h.callback))
}

// callbackAnswer is what the provider hears back.
type callbackAnswer struct {
	WithdrawalID string            `json:"withdrawal_id"`
	Status       withdrawal.Status `json:"status"`
	// Result: applied, duplicate (the event was applied before), unchanged
	// (the withdrawal is there or further on already) or conflict (the
	// report contradicts how it ended: kept out, operators alerted).
	Result string `json:"result"`
}

func (h PayoutWebhooks) callback(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	signer := webhookSigner{Secret: h.Secret, Keys: h.Keys, Clock: h.Clock, what: "payout callbacks", setting: "PAYOUT_WEBHOOK_SECRET"}
	if err := signer.authenticate(ctx, r); err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	s, err := ApplyCallback(ctx, h.Service, r.Body)
	if errors.Is(err, withdrawal.ErrNotSent) {
		return events.APIGatewayV2HTTPResponse{}, NewProblem(http.StatusConflict, CodeNotSent,
			"the withdrawal is "+string(s.Withdrawal.Shown())+" and was never sent for payout; the callback changed nothing")
	}
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, callbackAnswer{WithdrawalID: s.Withdrawal.ID, Status: s.Withdrawal.Shown(), Result: s.Applied.String()})
}

// webhookSigner checks the X-Hourglass-Signature of an inbound webhook
// (signed within the last 5 minutes) against its keys: Secret, or, if set,
// Keys, whose current or previous key may have signed it (one matching
// neither makes it read the secret again before the call is refused, so a
// key the sender rotated to is taken at once).
type webhookSigner struct {
	Secret []byte
	Keys   secrets.Source
	Clock  clock.Clock
	// what names the webhook and setting its secret, for the problems.
	what, setting string
}

// authenticate answers nil for a call the keys authenticate, else the
// problem to answer (401; 503 when no key is configured).
func (h webhookSigner) authenticate(ctx context.Context, r *Request) error {
	keys, err := h.keys(ctx, false)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return NewProblem(http.StatusServiceUnavailable, CodeUnavailable, h.what+" are not configured ("+h.setting+")")
	}
	err = h.verify(keys, r)
	if errors.Is(err, signature.ErrMismatch) && h.Keys != nil {
		if fresh, ferr := h.keys(ctx, true); ferr == nil && !sameKeys(fresh, keys) {
			err = h.verify(fresh, r)
		}
	}
	if err != nil {
		detail := "the " + signature.Header + " header does not authenticate this body"
		if errors.Is(err, signature.ErrTimestamp) {
			detail = "the signature's timestamp is not within 5 minutes of now"
		}
		return NewProblem(http.StatusUnauthorized, CodeUnauthenticated, detail)
	}
	return nil
}

// keys returns the keys a call may be signed with, read again if refresh.
func (h webhookSigner) keys(ctx context.Context, refresh bool) ([][]byte, error) {
	if h.Keys == nil {
		if len(h.Secret) == 0 {
			return nil, nil
		}
		return [][]byte{h.Secret}, nil
	}
	read := h.Keys.Keys
	if refresh {
		read = h.Keys.Refresh
	}
	k, err := read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.what, err)
	}
	if k.Current == "" {
		return nil, nil
	}
	return k.All(), nil
}

// verify checks the call's signature against each key; a mismatch
// under all of them is ErrMismatch, else the first key's verdict stands.
func (h webhookSigner) verify(keys [][]byte, r *Request) error {
	var first error
	for _, k := range keys {
		err := signature.Verify(k, r.Header(signature.Header), r.Body, h.Clock.Now(), signature.DefaultTolerance)
		if !errors.Is(err, signature.ErrMismatch) {
			return err // authentic (nil), stale, or malformed
		}
		first = cmp.Or(first, err)
	}
	return first
}

func sameKeys(a, b [][]byte) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}

var callbackFields = map[string]bool{"event_id": true, "withdrawal_id": true, "payout_id": true, "status": true, "reason": true}

// callbackOrder is the order a callback's problems are listed in.
var callbackOrder = map[string]int{"body": 0, "event_id": 1, "payout_id": 2, "reason": 3, "withdrawal_id": 4, "status": 5}

// ParseCallback reads a payout provider's callback body into the
// withdrawal it is about and the callback, judged by the service's rules
// (withdrawal.CheckCallback); a *validation.Error lists what is wrong.
// The body is read exactly, as the payment confirmations are: its keys as
// spelled (case-sensitive), each once, none unknown. A signed body means
// one thing only: a lenient reader would apply {"status":"paid",
// "Status":"failed"} as whichever spelling it happens to keep.
func ParseCallback(body []byte) (string, withdrawal.Callback, error) {
	read := &validation.Error{}
	raw := read.Object(body, callbackFields, false)
	if raw == nil {
		return "", withdrawal.Callback{}, read
	}
	var c withdrawal.Callback
	c.EventID, _ = read.String(raw, "event_id")
	c.PayoutID, _ = read.OptionalString(raw, "payout_id")
	c.Reason, _ = read.OptionalString(raw, "reason")
	status, _ := read.String(raw, "status")
	c.Status = withdrawal.Status(status)
	id, _ := read.String(raw, "withdrawal_id")
	if err := judged(read, withdrawal.CheckCallback(id, c), callbackOrder, named(read)); err != nil {
		return "", withdrawal.Callback{}, err
	}
	return id, c, nil
}

// ApplyCallback is a callback as the API takes it (its signature checked):
// the body parsed, then the service's Callback.
func ApplyCallback(ctx context.Context, svc *withdrawal.Service, body []byte) (withdrawal.Settled, error) {
	id, c, err := ParseCallback(body)
	if err != nil {
		return withdrawal.Settled{}, err
	}
	return svc.Callback(ctx, id, c)
}
