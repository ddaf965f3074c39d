package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/validation"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// Withdrawals serves /v1/withdrawals*.
type Withdrawals struct {
	Service *withdrawal.Service
	// Limiter, if set, rate-limits creation (the withdrawal family) and
	// the routes on one's own withdrawals (the read family) per user and
	// per source.
	Limiter *ratelimit.Limiter
	// LimitFailsClosed refuses creation (503 rate_limit_unavailable) while
	// the limiter cannot reach Redis: set with a ledger that creates
	// without Redis (dynamodb), where failing open would leave creation
	// unlimited for the whole outage. With the redis ledger a create fails
	// without Redis anyway.
	LimitFailsClosed bool
}

// Register adds the withdrawal routes and their error mapping to rt.
func (h Withdrawals) Register(rt *Router) {
	limited := rt.Limited
	if h.LimitFailsClosed {
		limited = rt.LimitedClosed
	}
	rt.Handle(http.MethodPost, "/v1/withdrawals", User, true, limited(h.Limiter, ratelimit.Withdrawal, h.create))
	// The routes on one's own withdrawals share the read family's budget;
	// they fail open (each answers 503 on its own while its ledger is down).
	read := func(next HandlerFunc) HandlerFunc { return rt.Limited(h.Limiter, ratelimit.Read, next) }
	rt.Handle(http.MethodGet, "/v1/withdrawals", User, false, read(h.list))
	rt.Handle(http.MethodGet, "/v1/withdrawals/{id}", User, false, read(h.get))
	rt.Handle(http.MethodDelete, "/v1/withdrawals/{id}", User, false, read(h.cancel))
	rt.Handle(http.MethodPatch, "/v1/withdrawals/{id}", User, true, read(h.reschedule))
	rt.MapErrors(withdrawalProblem)
}

func (h Withdrawals) create(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	c, err := CreateWithdrawal(ctx, h.Service, r.UserID, r.Header("idempotency-key"), r.Body)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	resp := RawJSON(http.StatusAccepted, CreatedBody(c.Withdrawal))
	resp.Headers["Location"] = "/v1/withdrawals/" + c.ID
	resp.Headers["ETag"] = c.ETag()
	if c.Replayed {
		resp.Headers["Idempotent-Replayed"] = "true"
	}
	return resp, nil
}

func (h Withdrawals) get(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	w, err := h.Service.Get(ctx, r.UserID, r.Params["id"])
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return withdrawalJSON(w)
}

// withdrawalJSON answers 200 with w and its ETag.
func withdrawalJSON(w withdrawal.Withdrawal) (events.APIGatewayV2HTTPResponse, error) {
	resp, err := JSON(http.StatusOK, ViewOf(w))
	if err == nil {
		resp.Headers["ETag"] = w.ETag()
	}
	return resp, err
}

type listBody struct {
	Items      []View `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

func (h Withdrawals) list(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	limit := withdrawal.DefaultPageSize
	if s, ok := r.Event.QueryStringParameters["limit"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, validation.New("limit", "must be a whole number within 1..%d", withdrawal.MaxPageSize)
		}
		limit = n
	}
	page, err := h.Service.List(ctx, r.UserID, limit, r.Query("cursor"))
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	body := listBody{Items: make([]View, len(page.Items)), NextCursor: page.Next}
	for i, w := range page.Items {
		body.Items[i] = ViewOf(w)
	}
	return JSON(http.StatusOK, body)
}

func (h Withdrawals) cancel(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	w, err := h.Service.Cancel(ctx, r.UserID, r.Params["id"])
	if errors.Is(err, withdrawal.ErrNotCancellable) {
		return events.APIGatewayV2HTTPResponse{}, NewProblem(http.StatusConflict, CodeNotCancellable,
			"the withdrawal is "+string(w.Status)+" and can no longer be cancelled")
	}
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return withdrawalJSON(w)
}

func (h Withdrawals) reschedule(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	w, err := RescheduleWithdrawal(ctx, h.Service, r.UserID, r.Params["id"], r.Body, r.Header("if-match"))
	switch {
	case errors.Is(err, withdrawal.ErrPreconditionFailed):
		p := NewProblem(http.StatusPreconditionFailed, CodePreconditionFailed,
			"the withdrawal changed since the ETag given in If-Match; read it again")
		p.ETag = w.ETag()
		return events.APIGatewayV2HTTPResponse{}, p
	case errors.Is(err, withdrawal.ErrNotReschedulable):
		return events.APIGatewayV2HTTPResponse{}, NewProblem(http.StatusConflict, CodeNotReschedulable, notReschedulable(w))
	case err != nil:
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return withdrawalJSON(w)
}

// notReschedulable says why w's time can no longer move.
func notReschedulable(w withdrawal.Withdrawal) string {
	switch {
	case w.Status == withdrawal.Processing:
		return "the withdrawal is being paid out and its time can no longer be changed"
	case w.MaybePaid:
		return "a payout call for this withdrawal may have gone through; its time can no longer be changed until the provider confirms"
	}
	return "the withdrawal is " + string(w.Status) + " and its time can no longer be changed"
}

func withdrawalProblem(err error) *Problem {
	switch {
	case errors.Is(err, withdrawal.ErrNotFound):
		return NewProblem(http.StatusNotFound, CodeNotFound, "no such withdrawal")
	case errors.Is(err, withdrawal.ErrIdempotencyConflict):
		return NewProblem(http.StatusUnprocessableEntity, CodeIdempotencyConflict,
			"this Idempotency-Key was used with a different request body")
	case errors.Is(err, withdrawal.ErrIdempotencyInFlight):
		p := NewProblem(http.StatusConflict, CodeIdempotencyInFlight,
			"the first request with this Idempotency-Key is still being processed; retry shortly")
		p.RetryAfter = 1
		return p
	}
	return nil
}
