package httpapi

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/seckill"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/validation"
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
	// Authentic, so its timestamp is the provider's word on when it sent
	// the confirmation, within the 5 minutes the signature allows.
	signedAt, _ := signature.SignedAt(r.Header(signature.Header))
	ans, err := ApplySignedPayment(ctx, h.Orders, r.Body, signedAt)
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

var (
	paymentFields = map[string]bool{"event_id": true, "order_id": true, "status": true, "amount": true, "currency": true}
	paymentAmount = regexp.MustCompile(`^(0|[1-9][0-9]{0,17})(\.[0-9]{1,18})?$`)
)

// ParsePayment reads a payment provider's confirmation body, judged by the
// flash sale's rules (seckill.CheckPayment); a *validation.Error lists
// what is wrong.
func ParsePayment(body []byte) (seckill.Payment, error) {
	read := &validation.Error{}
	raw := read.Object(body, paymentFields, false)
	if raw == nil {
		return seckill.Payment{}, read
	}
	var p seckill.Payment
	p.EventID, _ = read.String(raw, "event_id")
	p.OrderID, _ = read.String(raw, "order_id")
	if status, ok := read.String(raw, "status"); ok {
		switch status {
		case "succeeded", "failed":
			p.Succeeded = status == "succeeded"
		default:
			read.Add("status", `must be "succeeded" or "failed"`)
		}
	}
	if amount, ok := read.String(raw, "amount"); ok {
		if !paymentAmount.MatchString(amount) {
			read.Add("amount", `must be a decimal string such as "125.50"`)
		} else {
			p.Amount = decimal.RequireFromString(amount)
		}
	}
	p.Currency, _ = read.String(raw, "currency")
	if err := judged(read, seckill.CheckPayment(p), paymentOrder, named(read)); err != nil {
		return seckill.Payment{}, err
	}
	return p, nil
}

// paymentOrder is the order a payment's problems are listed in.
var paymentOrder = map[string]int{"event_id": 1, "order_id": 2, "status": 3, "amount": 4, "currency": 5}

// ApplyPayment is a payment confirmation as the API takes it (its
// signature checked): the body parsed, then the order processor's Pay,
// judged by its arrival.
func ApplyPayment(ctx context.Context, orders *seckill.OrderProcessor, body []byte) (seckill.PaymentAnswer, error) {
	return ApplySignedPayment(ctx, orders, body, time.Time{})
}

// ApplySignedPayment is ApplyPayment of a confirmation whose signature,
// checked, was made at signedAt: within the payment grace before its
// arrival, that is the time it is judged by (seckill.Payment.PaidAt).
func ApplySignedPayment(ctx context.Context, orders *seckill.OrderProcessor, body []byte, signedAt time.Time) (seckill.PaymentAnswer, error) {
	p, err := ParsePayment(body)
	if err != nil {
		return seckill.PaymentAnswer{}, err
	}
	p.SignedAt = signedAt
	return orders.Pay(ctx, p)
}
