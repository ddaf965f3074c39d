package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/ratelimit"
)

// Limited returns next behind family's rate limits, per user (r.UserID) and
// per source address (requestContext.http.sourceIp, which API Gateway sets
// from the connection: headers such as X-Forwarded-For are the client's to
// forge and count for nothing). A refused caller gets 429 rate_limited with
// Retry-After. With the family's limits off (or l nil) next runs without a
// Redis round trip. If the limiter cannot reach Redis, the request goes on:
// the limits guard against abuse, they must not add an outage.
func (rt *Router) Limited(l *ratelimit.Limiter, family ratelimit.Family, next HandlerFunc) HandlerFunc {
	return rt.limited(l, family, false, next)
}

// LimitedClosed is Limited failing closed: if the limiter cannot reach
// Redis the request is refused with 503 rate_limit_unavailable and
// Retry-After. For a route that would otherwise go on without Redis, and
// so without any limit, for as long as Redis is down (withdrawal creation
// on the dynamodb ledger).
func (rt *Router) LimitedClosed(l *ratelimit.Limiter, family ratelimit.Family, next HandlerFunc) HandlerFunc {
	return rt.limited(l, family, true, next)
}

func (rt *Router) limited(l *ratelimit.Limiter, family ratelimit.Family, failClosed bool, next HandlerFunc) HandlerFunc {
	return func(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
		d, err := l.Allow(ctx, family, r.UserID, r.Event.RequestContext.HTTP.SourceIP)
		if err != nil {
			rt.log.WarnContext(ctx, "rate limit not checked", "family", string(family), "fail_closed", failClosed,
				"request_id", r.Event.RequestContext.RequestID, "error", err.Error())
			if failClosed {
				p := NewProblem(http.StatusServiceUnavailable, CodeRateLimitUnavailable,
					"the rate limit cannot be checked right now, so the request was not taken; retry shortly")
				p.RetryAfter = 1
				return events.APIGatewayV2HTTPResponse{}, p
			}
		}
		if !d.Allowed {
			return events.APIGatewayV2HTTPResponse{}, rateLimited(family, d)
		}
		return next(ctx, r)
	}
}

func rateLimited(family ratelimit.Family, d ratelimit.Decision) *Problem {
	who := "you"
	if d.By == ratelimit.BySource {
		who = "your network address"
	}
	verb := map[ratelimit.Family]string{ratelimit.Purchase: "purchases", ratelimit.Withdrawal: "withdrawal requests",
		ratelimit.Read: "requests about your withdrawals and purchases"}[family]
	verb = cmp.Or(verb, "requests")
	p := NewProblem(http.StatusTooManyRequests, CodeRateLimited,
		fmt.Sprintf("too many %s from %s; retry in %d s", verb, who, d.RetryAfterSeconds()))
	p.RetryAfter = d.RetryAfterSeconds()
	return p
}
