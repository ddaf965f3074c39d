package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/orders"
	"github.com/hourglass/hourglass/shared/signature"
)

// The order events go to the topic and/or the webhook that are configured,
// to both when both are; with neither, to the log on the local stack and
// nowhere (an error) in Lambda, as finance's messages.
func TestOrderPublisherChoosesTheConfiguredChannels(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	const topic, hook = "arn:aws:sns:us-east-1:123456789012:orders", "https://orders.example.com/hook"
	for _, tc := range []struct {
		name        string
		topic, hook string
		lambda      bool
		want        []string // the channels' types, in order; nil: an error
	}{
		{"topic", topic, "", true, []string{"*orders.SNS"}},
		{"webhook", "", hook, true, []string{"*orders.Webhook"}},
		{"both", topic, hook, true, []string{"*orders.SNS", "*orders.Webhook"}},
		{"both locally", topic, hook, false, []string{"*orders.SNS", "*orders.Webhook"}},
		{"neither locally", "", "", false, []string{"*orders.Log"}},
		{"neither in lambda", "", "", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Config{OrdersTopicARN: tc.topic, OrdersWebhookURL: tc.hook, OrdersSecret: "k"}
			a := &App{Config: cfg, Clock: clock.System{}, Secrets: ConfiguredSecrets(cfg), lambda: tc.lambda,
				Log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
			p, err := a.orderPublisher(context.Background())
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), "ORDERS_TOPIC_ARN") {
					t.Fatalf("orderPublisher = %T, %v; want an error naming the settings", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			if all, ok := p.(orders.All); ok {
				for _, c := range all {
					got = append(got, typeName(c))
				}
			} else {
				got = []string{typeName(p)}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("channels %v, want %v", got, tc.want)
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *orders.SNS:
		return "*orders.SNS"
	case *orders.Webhook:
		return "*orders.Webhook"
	case *orders.Log:
		return "*orders.Log"
	}
	return "?"
}

// The webhook signs with the orders secret (not finance's or another), and
// the local log goes through the App's logger.
func TestOrderPublisherSignsWithTheOrdersSecretAndLogsThroughTheApp(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- signature.Verify([]byte("orders-key"), r.Header.Get(signature.Header), body, time.Now(), time.Minute)
	}))
	t.Cleanup(srv.Close)
	cfg := config.Config{OrdersWebhookURL: srv.URL, OrdersSecret: "orders-key", FinanceSecret: "finance-key",
		PaymentsWebhookSecret: "payments-key"}
	a := &App{Config: cfg, Clock: clock.System{}, Secrets: ConfiguredSecrets(cfg), lambda: true}
	p, err := a.orderPublisher(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e := orders.Event{Type: orders.Created, OrderID: "o_1", At: "2026-12-01T10:00:00.000Z"}
	if err := p.Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the webhook's signature does not verify with ORDERS_SIGNING_SECRET: %v", err)
	}

	var buf bytes.Buffer
	a = &App{Config: config.Config{}, Clock: clock.System{}, Log: slog.New(slog.NewJSONHandler(&buf, nil))}
	if p, err = a.orderPublisher(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	var line struct {
		Msg   string
		Event orders.Event
	}
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line.Msg != orders.LogMessage || line.Event != e {
		t.Fatalf("log %q (%v), want the event through the App's logger", buf.String(), err)
	}
}

// A Lambda function's App (ForLambda) has no log to fall back to.
func TestOrderPublisherOfALambdaFunctionNeedsAChannel(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1") // never dialled: nothing here talks to Redis
	a := ForLambda()
	t.Cleanup(func() { _ = a.Redis.Close() })
	if p, err := a.orderPublisher(context.Background()); err == nil {
		t.Fatalf("orderPublisher = %T in Lambda without ORDERS_TOPIC_ARN or ORDERS_WEBHOOK_URL, want an error", p)
	}
}
