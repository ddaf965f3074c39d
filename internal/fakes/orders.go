package fakes

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/signature"
)

// OrderEvent is what the downstream fake saw of one order event: its
// Idempotency-Key and its JSON body. (Package orders' own tests use this
// package, so it cannot decode into orders.Event.)
type OrderEvent struct {
	Key  string
	Body []byte
}

// OrderEvents is the downstream endpoint of ORDERS_WEBHOOK_URL: it checks
// each event's signature and that its Idempotency-Key is "<order_id>:<type>"
// (":<payment_event_id>" more for a refund),
// and records the events it accepted.
type OrderEvents struct {
	URL string

	mu     sync.Mutex
	events []OrderEvent
}

// NewOrderEvents starts an OrderEvents endpoint that checks signatures made
// with secret.
func NewOrderEvents(t testing.TB, secret string) *OrderEvents {
	o := &OrderEvents{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := signature.Verify([]byte(secret), r.Header.Get(signature.Header), body, time.Now(), time.Minute); err != nil {
			t.Errorf("order events: bad signature: %v", err)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var e struct {
			Type           string `json:"type"`
			OrderID        string `json:"order_id"`
			PaymentEventID string `json:"payment_event_id"`
		}
		key := r.Header.Get("Idempotency-Key")
		err := json.Unmarshal(body, &e)
		want := e.OrderID + ":" + e.Type
		if e.PaymentEventID != "" {
			want += ":" + e.PaymentEventID
		}
		if err != nil || e.OrderID == "" || key != want {
			t.Errorf("order events: bad event %s under key %q (%v)", body, key, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.events = append(o.events, OrderEvent{Key: key, Body: body})
		o.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

// Events returns the accepted events in arrival order.
func (o *OrderEvents) Events() []OrderEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]OrderEvent(nil), o.events...)
}
