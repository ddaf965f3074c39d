package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/delayq"
	"github.com/hourglass/hourglass/shared/ops"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/seckill"
)

// Ops serves the operator and health routes.
type Ops struct {
	Queues func(ctx context.Context) ([]*delayq.Queue, error)
	Items  *seckill.Store
	Clock  clock.Clock
	// Ping checks the dependencies /healthz vouches for.
	Ping func(ctx context.Context) error
	// Limiter, if set, adds the rate limits and their refusals to the stats.
	Limiter *ratelimit.Limiter
}

// Register adds GET /v1/admin/stats and GET /healthz to rt.
func (h Ops) Register(rt *Router) {
	rt.Handle(http.MethodGet, "/v1/admin/stats", Admin, false, h.stats)
	rt.Handle(http.MethodGet, "/healthz", Public, false, h.health)
}

func (h Ops) stats(ctx context.Context, _ *Request) (events.APIGatewayV2HTTPResponse, error) {
	qs, err := h.Queues(ctx)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	snap, err := ops.Collect(ctx, h.Clock.Now(), qs, h.Items)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	snap.RateLimits = h.Limiter.Stats()
	return JSON(http.StatusOK, snap)
}

func (h Ops) health(ctx context.Context, _ *Request) (events.APIGatewayV2HTTPResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := h.Ping(ctx); err != nil {
		p := NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "redis is unreachable")
		p.RetryAfter = 1
		return events.APIGatewayV2HTTPResponse{}, p
	}
	return JSON(http.StatusOK, map[string]string{"status": "ok"})
}
