package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/secrets"
)

// PaymentWebhooks serves POST /v1/webhooks/payments: the payment provider's
// confirmations of flash-sale orders awaiting payment. Like the payout
// callbacks, the route has no user identity: the signature
// (X-Hourglass-Signature with PAYMENTS_WEBHOOK_SECRET, signed within the
// last 5 minutes) is the authentication.
type PaymentWebhooks struct {
	Orders *seckill.OrderProcessor
	Secret []byte
	// Keys, if set, replaces Secret (PAYMENTS_WEBHOOK_SECRET_ID), as for
	// PayoutWebhooks.
	Keys  secrets.Source
	Clock clock.Clock
	// Limiter, if set, rate-limits confirmations per source address (the
	// webhook family).
	Limiter *ratelimit.Limiter
}

// PaymentsWebhookPath is the route of the payment provider's confirmations.
const PaymentsWebhookPath = "/v1/webhooks/payments"

// Register adds the confirmation route and its error mapping to rt.
func (h PaymentWebhooks) Register(rt *Router) {
	rt.Handle(http.MethodPost, PaymentsWebhookPath, Public, true, rt.Limited(h.Limiter, ratelimit.Webhook, h.confirm))
	rt.MapErrors(paymentProblem)
}

func (h PaymentWebhooks) confirm(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	signer := webhookSigner{Secret: h.Secret, Keys: h.Keys, Clock: h.Clock, what: "payment confirmations", setting: "PAYMENTS_WEBHOOK_SECRET"}
	if err := signer.authenticate(ctx, r); err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	ans, err := h.Orders.Pay(ctx, r.Body)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, ans)
}

func paymentProblem(err error) *Problem {
	switch {
	case errors.Is(err, seckill.ErrNoOrder):
		return NewProblem(http.StatusNotFound, CodeNotFound, "no order awaits payment under this id")
	case errors.Is(err, seckill.ErrPaymentMismatch):
		return NewProblem(http.StatusUnprocessableEntity, CodePaymentMismatch,
			"the amount or currency is not the order's; the order is not paid")
	}
	return nil
}
