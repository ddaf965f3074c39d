package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/shared/validation"
)

// Problem is an RFC 9457 problem detail. Code is the stable word the app
// switches on; the other fields are for people.
type Problem struct {
	Status int
	Code   string
	Detail string
	Errors []validation.Field
	// RetryAfter, in seconds, is sent as the Retry-After header when set.
	RetryAfter int
	// Allow is sent as the Allow header (405).
	Allow string
	// ETag, if set, is sent as the ETag header: the current entity tag of
	// the resource a 412 refused to change.
	ETag string
}

func (p *Problem) Error() string { return p.Code + ": " + p.Detail }

// Stable problem codes (SPEC.md "HTTP API").
const (
	CodeValidationFailed     = "validation_failed"
	CodePayloadTooLarge      = "payload_too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeUnauthenticated      = "unauthenticated"
	CodeForbidden            = "forbidden"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeIdempotencyConflict  = "idempotency_conflict"
	CodeIdempotencyInFlight  = "idempotency_in_flight"
	CodeNotCancellable       = "not_cancellable"
	CodeNotReschedulable     = "not_reschedulable"
	CodePreconditionFailed   = "precondition_failed"
	CodeAlreadyPurchased     = "already_purchased"
	CodeNotStarted           = "not_started"
	CodeSoldOut              = "sold_out"
	CodeEnded                = "ended"
	CodeBacklogFull          = "backlog_full"
	CodeOrdersPending        = "orders_pending"
	CodePreheatInProgress    = "preheat_in_progress"
	CodeRateLimited          = "rate_limited"
	CodeUnavailable          = "unavailable"
	CodeInternal             = "internal"
)

// Stable problem codes of the edge's own refusals.
const (
	// CodeAdminNotConfigured (403): no operator role is configured, so
	// every admin call is refused (HOURGLASS_ADMIN_ROLE_ARNS is empty).
	CodeAdminNotConfigured = "admin_not_configured"
	// CodeRateLimitUnavailable (503, Retry-After): the rate limiter cannot
	// be asked and the route fails closed rather than go on unlimited.
	CodeRateLimitUnavailable = "rate_limit_unavailable"
)

// Stable problem codes of the operator function (POST /v1/admin/operator).
const (
	// CodeNotOperatorCommand (400): the command is not one the operator
	// function runs (payouts unresolved|resolve, reconcile, stats, dead,
	// peek); nothing ran.
	CodeNotOperatorCommand = "not_an_operator_command"
)

// Stable problem codes of the payout provider's callbacks.
const (
	// CodeNotSent (409): the callback is about a withdrawal that was never
	// sent to the provider (scheduled, or cancelled before any call); it
	// changed nothing and operators are alerted.
	CodeNotSent = "not_sent"
)

// Stable problem codes of the payment provider's confirmations.
const (
	// CodePaymentMismatch (422): the payment's amount or currency is not
	// its order's; the order is not paid.
	CodePaymentMismatch = "payment_mismatch"
)

var titles = map[string]string{
	CodeNotOperatorCommand:   "Not an operator command",
	CodePaymentMismatch:      "The payment's amount or currency is not the order's",
	CodeNotSent:              "The withdrawal was never sent for payout",
	CodeValidationFailed:     "The request is not valid",
	CodePayloadTooLarge:      "The request body is too large",
	CodeUnsupportedMediaType: "The request body must be application/json",
	CodeUnauthenticated:      "Authentication is required",
	CodeForbidden:            "Not allowed",
	CodeAdminNotConfigured:   "No operator role is configured",
	CodeNotFound:             "Not found",
	CodeMethodNotAllowed:     "Method not allowed",
	CodeIdempotencyConflict:  "Idempotency key reused with another request",
	CodeIdempotencyInFlight:  "A request with this idempotency key is in progress",
	CodeNotCancellable:       "The withdrawal can no longer be cancelled",
	CodeNotReschedulable:     "The withdrawal can no longer be rescheduled",
	CodePreconditionFailed:   "The resource changed since the given ETag",
	CodeAlreadyPurchased:     "The per-user limit of this item is reached",
	CodeNotStarted:           "The sale has not started",
	CodeSoldOut:              "Sold out",
	CodeEnded:                "The sale has ended",
	CodeBacklogFull:          "Too many orders waiting",
	CodeOrdersPending:        "Admitted purchases still wait for their orders",
	CodePreheatInProgress:    "Another preheat of the item is under way",
	CodeRateLimited:          "Too many requests",
	CodeUnavailable:          "Service temporarily unavailable",
	CodeRateLimitUnavailable: "The rate limit cannot be checked",
	CodeInternal:             "Internal error",
}

// Title returns the human title of a problem code.
func Title(code string) string {
	if t, ok := titles[code]; ok {
		return t
	}
	return code
}

// NewProblem returns a problem without field errors.
func NewProblem(status int, code, detail string) *Problem {
	return &Problem{Status: status, Code: code, Detail: detail}
}

// MaxProblemErrors caps the errors list of a problem: a body of thousands of
// unknown fields must not make an answer several times its size. The first
// ones are listed; errors_omitted counts the rest.
const MaxProblemErrors = 20

type problemBody struct {
	Type   string             `json:"type"`
	Title  string             `json:"title"`
	Status int                `json:"status"`
	Detail string             `json:"detail"`
	Code   string             `json:"code"`
	Errors []validation.Field `json:"errors"`
	// ErrorsOmitted is an extension member (RFC 9457 3.2), present only
	// when the errors list was cut at MaxProblemErrors.
	ErrorsOmitted int `json:"errors_omitted,omitempty"`
}

// response renders p as application/problem+json.
func (p *Problem) response() events.APIGatewayV2HTTPResponse {
	errs := p.Errors
	if errs == nil {
		errs = []validation.Field{}
	}
	omitted := 0
	if len(errs) > MaxProblemErrors {
		errs, omitted = errs[:MaxProblemErrors], len(errs)-MaxProblemErrors
	}
	body, _ := json.Marshal(problemBody{
		Type:          "urn:hourglass:problem:" + p.Code,
		Title:         Title(p.Code),
		Status:        p.Status,
		Detail:        p.Detail,
		Code:          p.Code,
		Errors:        errs,
		ErrorsOmitted: omitted,
	})
	h := map[string]string{"Content-Type": "application/problem+json", "Cache-Control": "no-store"}
	if p.RetryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(p.RetryAfter)
	}
	if p.Allow != "" {
		h["Allow"] = p.Allow
	}
	if p.ETag != "" {
		h["ETag"] = p.ETag
	}
	return events.APIGatewayV2HTTPResponse{StatusCode: p.Status, Headers: h, Body: string(body)}
}

// Unavailable reports whether err means a dependency (Redis) is down, full
// (OOM under noeviction) or overloaded rather than a bug: the caller should
// retry later.
func Unavailable(err error) bool {
	for _, target := range []error{
		context.DeadlineExceeded, redis.ErrPoolTimeout, redis.ErrClosed, io.EOF, io.ErrUnexpectedEOF,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EPIPE,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err)
}
