package app

import (
	"context"
	"io"
	"testing"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/config"
	"github.com/hourglass/hourglass/shared/finance"
)

// With financeWebhookUrl the stack gives the consumer both the topic and the
// webhook: finance must hear of each payout on both, not on the topic alone.
func TestNotifierTellsTopicAndWebhookWhenBothAreSet(t *testing.T) {
	t.Setenv("AWS_REGION", "us-east-1")
	for _, tc := range []struct {
		name         string
		topic, hook  string
		wantChannels int
	}{
		{"topic", "arn:aws:sns:us-east-1:123456789012:finance", "", 1},
		{"webhook", "", "https://finance.example.com/hook", 1},
		{"both", "arn:aws:sns:us-east-1:123456789012:finance", "https://finance.example.com/hook", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Config{FinanceTopicARN: tc.topic, FinanceWebhookURL: tc.hook, FinanceSecret: "k"}
			a := &App{Config: cfg, Clock: clock.System{}, Secrets: ConfiguredSecrets(cfg)}
			n, err := a.Notifier(context.Background(), io.Discard, false)
			if err != nil {
				t.Fatal(err)
			}
			got := 1
			if b, ok := n.(finance.Both); ok {
				got = len(b)
				if _, ok := b[0].(*finance.SNS); !ok {
					t.Errorf("first channel is %T, want the topic", b[0])
				}
				if _, ok := b[1].(*finance.Webhook); !ok {
					t.Errorf("second channel is %T, want the webhook", b[1])
				}
			}
			if got != tc.wantChannels {
				t.Fatalf("%T tells %d channels, want %d", n, got, tc.wantChannels)
			}
		})
	}
	a := &App{Config: config.Config{}, Clock: clock.System{}}
	if _, err := a.Notifier(context.Background(), io.Discard, false); err == nil {
		t.Fatal("no channel in Lambda: want an error, finance must receive every payout")
	}
}
