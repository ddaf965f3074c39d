package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// PayoutWebhooks serves POST /v1/webhooks/payouts: the payout provider's
// callbacks with a payout's final status. The route has no user identity:
// the signature (X-Hourglass-Signature with PAYOUT_WEBHOOK_SECRET, signed
// within the last 5 minutes) is the authentication.
type PayoutWebhooks struct {
	Service *withdrawal.Service
	Secret  []byte
	Clock   clock.Clock
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
	if len(h.Secret) == 0 {
		return events.APIGatewayV2HTTPResponse{}, NewProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"payout callbacks are not configured (PAYOUT_WEBHOOK_SECRET)")
	}
	err := signature.Verify(h.Secret, r.Header(signature.Header), r.Body, h.Clock.Now(), signature.DefaultTolerance)
	if err != nil {
		detail := "the " + signature.Header + " header does not authenticate this body"
		if errors.Is(err, signature.ErrTimestamp) {
			detail = "the signature's timestamp is not within 5 minutes of now"
		}
		return events.APIGatewayV2HTTPResponse{}, NewProblem(http.StatusUnauthorized, CodeUnauthenticated, detail)
	}
	s, err := h.Service.Callback(ctx, r.Body)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, callbackAnswer{WithdrawalID: s.Withdrawal.ID, Status: s.Withdrawal.Shown(), Result: s.Applied.String()})
}
