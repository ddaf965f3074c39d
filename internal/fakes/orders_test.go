package fakes_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/orders"
)

// The downstream fake takes what orders.Webhook sends, under its key.
func TestOrderEventsTakesTheWebhooksEvents(t *testing.T) {
	down := fakes.NewOrderEvents(t, "ord-secret")
	h, err := orders.NewWebhook(orders.WebhookConfig{URL: down.URL, Secret: []byte("ord-secret")})
	if err != nil {
		t.Fatal(err)
	}
	e := orders.Event{Type: orders.Expired, OrderID: "o_9", ItemID: "sku", Quantity: 1, At: "2026-12-01T10:00:00.000Z"}
	if err := h.Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	got := down.Events()
	if len(got) != 1 || got[0].Key != "o_9:order.expired" {
		t.Fatalf("events %+v, want the one under o_9:order.expired", got)
	}
	var back orders.Event
	if err := json.Unmarshal(got[0].Body, &back); err != nil || back != e {
		t.Fatalf("body %s (%v), want %+v", got[0].Body, err, e)
	}
}
