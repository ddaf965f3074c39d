package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/ratelimit"
	"github.com/hourglass/hourglass/shared/seckill"
)

// Seckill serves /v1/seckill/*.
type Seckill struct {
	Service *seckill.Service
	// Limiter, if set, rate-limits purchase admission (the purchase
	// family) and the buyer's own purchase (the read family) per user and
	// per source.
	Limiter *ratelimit.Limiter
}

// Register adds the flash-sale routes and their error mapping to rt.
func (h Seckill) Register(rt *Router) {
	rt.Handle(http.MethodPut, "/v1/seckill/items/{item_id}", Admin, true, h.preheat)
	rt.Handle(http.MethodGet, "/v1/seckill/items/{item_id}", Public, false, h.state)
	rt.Handle(http.MethodPost, "/v1/seckill/items/{item_id}/purchases", User, true, rt.Limited(h.Limiter, ratelimit.Purchase, h.purchase))
	rt.Handle(http.MethodGet, "/v1/seckill/items/{item_id}/purchases/me", User, false, rt.Limited(h.Limiter, ratelimit.Read, h.mine))
	rt.MapErrors(seckillProblem)
}

func (h Seckill) preheat(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	sale, err := ParsePreheat(r.Params["item_id"], r.Body, h.Service.Clock().Now(), h.Service.Prices())
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	st, err := h.Service.Preheat(ctx, sale)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, st)
}

func (h Seckill) state(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	st, err := h.Service.State(ctx, r.Params["item_id"])
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, st)
}

func (h Seckill) purchase(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	qty, err := ParsePurchase(r.Params["item_id"], r.Body)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	p, err := h.Service.Purchase(ctx, r.Params["item_id"], r.UserID, qty)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusAccepted, PurchaseViewOf(p))
}

func (h Seckill) mine(ctx context.Context, r *Request) (events.APIGatewayV2HTTPResponse, error) {
	p, err := h.Service.Mine(ctx, r.Params["item_id"], r.UserID)
	if err != nil {
		return events.APIGatewayV2HTTPResponse{}, err
	}
	return JSON(http.StatusOK, PurchaseViewOf(p))
}

// PurchaseView is a purchase as the API shows it.
type PurchaseView struct {
	PurchaseID string                 `json:"purchase_id"`
	ItemID     string                 `json:"item_id"`
	Status     seckill.PurchaseStatus `json:"status"`
	Quantity   int                    `json:"quantity"`
	OrderID    *string                `json:"order_id"`
	CreatedAt  string                 `json:"created_at"`
	// PayBy, Amount and Currency are null where they do not apply: no
	// payment window, no price, or no order yet.
	PayBy    *string `json:"pay_by"`
	Amount   *string `json:"amount"`
	Currency *string `json:"currency"`
}

// PurchaseViewOf returns the API representation of p.
func PurchaseViewOf(p seckill.Purchase) PurchaseView {
	v := PurchaseView{PurchaseID: p.ID, ItemID: p.ItemID, Status: p.Status, Quantity: p.Quantity,
		CreatedAt: clock.Format(p.CreatedAt)}
	if p.OrderID != "" {
		v.OrderID = &p.OrderID
	}
	if !p.PayBy.IsZero() {
		at := clock.Format(p.PayBy)
		v.PayBy = &at
	}
	if p.Amount != "" {
		v.Amount, v.Currency = &p.Amount, &p.Currency
	}
	return v
}

func seckillProblem(err error) *Problem {
	switch {
	case errors.Is(err, seckill.ErrNotFound):
		return NewProblem(http.StatusNotFound, CodeNotFound, "no such item")
	case errors.Is(err, seckill.ErrNoPurchase):
		return NewProblem(http.StatusNotFound, CodeNotFound, "you have no purchase of this item")
	case errors.Is(err, seckill.ErrAlreadyPurchased):
		return NewProblem(http.StatusConflict, CodeAlreadyPurchased, "you already bought as much of this item as one buyer may")
	case errors.Is(err, seckill.ErrNotStarted):
		return NewProblem(http.StatusConflict, CodeNotStarted, strings.TrimPrefix(err.Error(), "seckill: "))
	case errors.Is(err, seckill.ErrNotEnoughLeft):
		return NewProblem(http.StatusGone, CodeSoldOut, "not enough of the item is left for this quantity; a smaller one may still be admitted")
	case errors.Is(err, seckill.ErrSoldOut):
		return NewProblem(http.StatusGone, CodeSoldOut, "the item is sold out")
	case errors.Is(err, seckill.ErrEnded):
		return NewProblem(http.StatusGone, CodeEnded, "the sale has ended")
	case errors.Is(err, seckill.ErrBacklogFull):
		p := NewProblem(http.StatusTooManyRequests, CodeBacklogFull, "too many orders are waiting to be made; retry shortly")
		p.RetryAfter = 1
		return p
	case errors.Is(err, seckill.ErrOrdersPending):
		return NewProblem(http.StatusConflict, CodeOrdersPending,
			"purchases of the current sale still wait for their orders; preheat again once they are confirmed or released")
	case errors.Is(err, seckill.ErrPreheatInProgress):
		return NewProblem(http.StatusConflict, CodePreheatInProgress,
			"another preheat of the item is under way; nothing was changed: read the item, and preheat again if needed")
	case errors.Is(err, seckill.ErrPreheating):
		p := NewProblem(http.StatusServiceUnavailable, CodeUnavailable, "the item is being preheated again; retry shortly")
		p.RetryAfter = 1
		return p
	case errors.Is(err, seckill.ErrPreheatAbandoned):
		p := NewProblem(http.StatusServiceUnavailable, CodeUnavailable,
			"the preheat took longer than its deadline and was finished by recovery (rolled back or forward): read the item's state, and preheat again if needed")
		p.RetryAfter = 1
		return p
	}
	return nil
}
