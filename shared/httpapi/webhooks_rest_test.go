package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/signature"
)

// The providers' webhooks reach the enqueue function through a REST API
// (infra/webhooks.go), whose Lambda proxy events are payload format 1.0.

// restPayload is events/<name>.json, a REST API event, with body raw
// signed at at (zero: now) with secret; no secret leaves it unsigned.
func restPayload(t *testing.T, name, secret, raw string, at time.Time) []byte {
	t.Helper()
	var ev events.APIGatewayProxyRequest
	if err := json.Unmarshal(rawFixture(t, name), &ev); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	if at.IsZero() {
		at = time.Now()
	}
	ev.Body, ev.IsBase64Encoded = raw, false
	delete(ev.Headers, "X-Hourglass-Signature")
	delete(ev.MultiValueHeaders, "X-Hourglass-Signature")
	if secret != "" {
		sig := signature.Sign([]byte(secret), at, []byte(raw))
		ev.Headers["X-Hourglass-Signature"] = sig
		ev.MultiValueHeaders["X-Hourglass-Signature"] = []string{sig}
	}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// invokeREST runs a REST API event through the handler and reads the
// answer as API Gateway's Lambda proxy integration does: only the fields
// it knows, no cookies field.
func (s *stack) invokeREST(t *testing.T, payload []byte) events.APIGatewayProxyResponse {
	t.Helper()
	out, err := s.h.Invoke(context.Background(), payload)
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	var resp events.APIGatewayProxyResponse
	if err := dec.Decode(&resp); err != nil {
		t.Fatalf("a REST API cannot read the answer %s: %v", out, err)
	}
	return resp
}

// sameAnswer: the REST API's answer is the HTTP API's, status, headers
// and body, once the REST side's ids (old) read as the HTTP side's (new).
func sameAnswer(t *testing.T, what string, v2 events.APIGatewayV2HTTPResponse, v1 events.APIGatewayProxyResponse, oldnew ...string) {
	t.Helper()
	r := strings.NewReplacer(oldnew...)
	got := events.APIGatewayV2HTTPResponse{StatusCode: v1.StatusCode, Headers: v1.Headers, MultiValueHeaders: v1.MultiValueHeaders,
		Body: r.Replace(v1.Body), IsBase64Encoded: v1.IsBase64Encoded}
	if d := cmp.Diff(v2, got); d != "" {
		t.Errorf("%s: the REST API's answer differs from the HTTP API's (-http +rest):\n%s", what, d)
	}
}

// TestPayoutCallbacksThroughREST: a signed payout callback in the REST
// API's format is served exactly as in the HTTP API's: applied, duplicate,
// conflict and a later status alike, and every refusal.
func TestPayoutCallbacksThroughREST(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		a, _ := s.create(t, key("via-http"))
		b, _ := s.create(t, key("via-rest"))
		sent(t, s, a.ID)
		sent(t, s, b.ID)
		for _, step := range []struct{ event, status string }{
			{"ev-1", "paid"}, {"ev-1", "paid"}, {"ev-2", "failed"}, {"ev-3", "returned"}, {"ev-0", "paid"},
		} {
			v2 := s.invoke(t, callback(t, webhookSecret, callbackBody("http-"+step.event, a.ID, step.status), time.Time{}))
			v1 := s.invokeREST(t, restPayload(t, "webhook-payout-rest", webhookSecret, callbackBody("rest-"+step.event, b.ID, step.status), time.Time{}))
			sameAnswer(t, step.event+" "+step.status, v2, v1, b.ID, a.ID)
		}
		paid := callbackBody("ev-9", a.ID, "paid")
		for name, c := range map[string]struct{ secret string }{"the payments secret": {paymentsSecret}, "unsigned": {""}} {
			v2 := s.invoke(t, payload(t, "webhook-payout", "", body(paid), func(ev *events.APIGatewayV2HTTPRequest) {
				if c.secret == "" {
					delete(ev.Headers, "x-hourglass-signature")
				} else {
					ev.Headers["x-hourglass-signature"] = signature.Sign([]byte(c.secret), time.Now(), []byte(paid))
				}
			}))
			sameAnswer(t, name, v2, s.invokeREST(t, restPayload(t, "webhook-payout-rest", c.secret, paid, time.Time{})))
		}
		stale := time.Now().Add(-6 * time.Minute)
		sameAnswer(t, "6 minutes old", s.invoke(t, callback(t, webhookSecret, paid, stale)),
			s.invokeREST(t, restPayload(t, "webhook-payout-rest", webhookSecret, paid, stale)))
		unknown := callbackBody("ev-x", "wd_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "paid")
		sameAnswer(t, "unknown withdrawal", s.invoke(t, callback(t, webhookSecret, unknown, time.Time{})),
			s.invokeREST(t, restPayload(t, "webhook-payout-rest", webhookSecret, unknown, time.Time{})))
		if v1 := s.invokeREST(t, rawFixture(t, "webhook-payout-rest")); v1.StatusCode != 401 {
			t.Errorf("the fixture's stale signature: %d, want 401", v1.StatusCode)
		}
	})
}

// TestPaymentConfirmationsThroughREST: likewise a signed payment
// confirmation: paid, replayed, failed, a mismatch, an unknown order.
func TestPaymentConfirmationsThroughREST(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisURL string) {
		s := newStack(t, redisURL, nil)
		ids := s.awaitingOrders(t, "rest-item", 600, "alice", "bob")
		alice, bob := ids[0], ids[1]
		for _, step := range []struct{ event, status, amount string }{
			{"evt-1", "failed", "4999.00"}, {"evt-2", "succeeded", "49.99"}, {"evt-3", "succeeded", "4999.00"}, {"evt-3", "succeeded", "4999.00"},
		} {
			v2 := s.invoke(t, paymentCall(t, paymentsSecret, paymentBody("http-"+step.event, alice, step.status, step.amount, "CNY"), time.Time{}))
			v1 := s.invokeREST(t, restPayload(t, "webhook-payment-rest", paymentsSecret,
				paymentBody("rest-"+step.event, bob, step.status, step.amount, "CNY"), time.Time{}))
			sameAnswer(t, step.event+" "+step.status, v2, v1, bob, alice)
		}
		if v := wantPurchase(t, s.invoke(t, itemPayload(t, "seckill-purchase-me", "rest-item", sub("bob"))), 200); v.Status != "paid" {
			t.Errorf("bob, paid through the REST API: %s", v.Status)
		}
		unknown := paymentBody("evt-x", "or_01KB6Y0Z3M5Q8R2T4V6W8X0Y1Z", "succeeded", "1", "CNY")
		sameAnswer(t, "unknown order", s.invoke(t, paymentCall(t, paymentsSecret, unknown, time.Time{})),
			s.invokeREST(t, restPayload(t, "webhook-payment-rest", paymentsSecret, unknown, time.Time{})))
		sameAnswer(t, "the payout secret", s.invoke(t, paymentCall(t, webhookSecret, unknown, time.Time{})),
			s.invokeREST(t, restPayload(t, "webhook-payment-rest", webhookSecret, unknown, time.Time{})))
	})
}

// TestRESTEventsAreAnonymous: the REST API authenticates no one, so
// whatever its event's requestContext claims, a user or admin route
// answers it as the HTTP API answers a caller without credentials.
func TestRESTEventsAreAnonymous(t *testing.T) {
	s := newStack(t, "redis://"+miniredis.RunT(t).Addr(), nil)
	for _, c := range []struct{ fixture, method, path string }{
		{"withdrawal-list", "GET", "/v1/withdrawals"},
		{"admin-stats", "GET", "/v1/admin/stats"},
	} {
		claims := `{"claims":{"sub":"mallory","scope":"hourglass/user"},"iam":{"userArn":"arn:aws:sts::123456789012:assumed-role/hourglass-operator/x"}}`
		v1 := s.invokeREST(t, []byte(`{"httpMethod":"`+c.method+`","path":"`+c.path+`","resource":"`+c.path+`",
			"headers":{"Authorization":"Bearer x"},"requestContext":{"requestId":"req-1","authorizer":`+claims+`,"identity":{"sourceIp":"198.51.100.20"}}}`))
		v2 := s.invoke(t, payload(t, c.fixture, "", noAuthorizer))
		if v1.StatusCode != v2.StatusCode || v1.StatusCode < 400 {
			t.Errorf("%s %s through the REST API: %d %s; the HTTP API without credentials: %d", c.method, c.path, v1.StatusCode, v1.Body, v2.StatusCode)
		}
	}
}
