package finance

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func TestSNSPublishes(t *testing.T) {
	tests := []struct {
		name  string
		topic string
		fifo  bool
	}{
		{"standard topic", "arn:aws:sns:us-east-1:123456789012:finance-payouts", false},
		{"fifo topic", "arn:aws:sns:us-east-1:123456789012:finance-payouts.fifo", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, got := fakes.NewSNS(t, http.StatusOK, fakes.SNSPublishOK)
			s, err := NewSNS(client, tt.topic)
			if err != nil {
				t.Fatalf("NewSNS: %v", err)
			}
			m := message(t, "wd-1")
			if err := s.Notify(context.Background(), m); err != nil {
				t.Fatalf("Notify: %v", err)
			}

			r := <-got
			if !strings.HasPrefix(r.Authorization, "AWS4-HMAC-SHA256 ") {
				t.Errorf("Authorization = %q, want a SigV4 signature", r.Authorization)
			}
			for name, want := range map[string]string{
				"Action":   "Publish",
				"Version":  "2010-03-31",
				"TopicArn": tt.topic,
			} {
				if got := r.Form.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			var msg withdrawal.Processed
			if err := json.Unmarshal([]byte(r.Form.Get("Message")), &msg); err != nil {
				t.Fatalf("Message %q does not parse: %v", r.Form.Get("Message"), err)
			}
			if diff := cmp.Diff(m, msg); diff != "" {
				t.Errorf("Message (-want +got):\n%s", diff)
			}
			wantAttrs := map[string][2]string{
				"type":          {"String", "payout.processed"},
				"status":        {"String", "paid"},
				"withdrawal_id": {"String", "wd-1"},
				"dedup_key":     {"String", "wd-1:paid"},
			}
			if diff := cmp.Diff(wantAttrs, r.Attributes()); diff != "" {
				t.Errorf("MessageAttributes (-want +got):\n%s", diff)
			}
			var wantGroup, wantDedup []string
			if tt.fifo {
				wantGroup, wantDedup = []string{"wd-1"}, []string{"wd-1:paid"}
			}
			if diff := cmp.Diff(wantGroup, r.Form["MessageGroupId"]); diff != "" {
				t.Errorf("MessageGroupId (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantDedup, r.Form["MessageDeduplicationId"]); diff != "" {
				t.Errorf("MessageDeduplicationId (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSNSErrors(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		code   string
	}{
		{"topic not found", http.StatusNotFound, fakes.SNSPublishNotFound, "NotFound"},
		{"internal error", http.StatusInternalServerError, fakes.SNSPublishInternal, "InternalError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, _ := fakes.NewSNS(t, tt.status, tt.body)
			s, err := NewSNS(client, "arn:aws:sns:us-east-1:123456789012:finance-payouts")
			if err != nil {
				t.Fatalf("NewSNS: %v", err)
			}
			err = s.Notify(context.Background(), message(t, "wd-1"))
			if err == nil {
				t.Fatal("Notify succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.code) || !strings.Contains(err.Error(), "wd-1") {
				t.Errorf("error %q names neither the code %s nor the withdrawal", err, tt.code)
			}
		})
	}
}

func TestSNSNotFoundIsTyped(t *testing.T) {
	client, _ := fakes.NewSNS(t, http.StatusNotFound, fakes.SNSPublishNotFound)
	s, err := NewSNS(client, "arn:aws:sns:us-east-1:123456789012:finance-payouts")
	if err != nil {
		t.Fatalf("NewSNS: %v", err)
	}
	err = s.Notify(context.Background(), message(t, "wd-1"))
	var nf *types.NotFoundException
	if !errors.As(err, &nf) {
		t.Fatalf("error %v (%T) is not a *types.NotFoundException", err, errors.Unwrap(err))
	}
}

func TestSNSRejectsMessageWithoutID(t *testing.T) {
	client, got := fakes.NewSNS(t, http.StatusOK, fakes.SNSPublishOK)
	s, err := NewSNS(client, "arn:aws:sns:us-east-1:123456789012:finance-payouts.fifo")
	if err != nil {
		t.Fatalf("NewSNS: %v", err)
	}
	if err := s.Notify(context.Background(), message(t, "")); err == nil {
		t.Fatal("Notify succeeded, want an error")
	}
	if len(got) != 0 {
		t.Error("a message without id was published")
	}
}

func TestNewSNSValidatesTopicARN(t *testing.T) {
	tests := []struct {
		arn string
		ok  bool
	}{
		{"arn:aws:sns:us-east-1:123456789012:finance", true},
		{"arn:aws:sns:eu-west-1:123456789012:finance_payouts-1.fifo", true},
		{"arn:aws-cn:sns:cn-north-1:123456789012:finance", true},
		{"arn:aws-us-gov:sns:us-gov-west-1:123456789012:finance", true},
		{"arn:aws:sns:us-east-1:000000000000:" + strings.Repeat("a", 256), true},
		{"arn:aws:sns:us-east-1:000000000000:" + strings.Repeat("a", 251) + ".fifo", true},
		{"", false},
		{"finance", false},
		{"https://sns.us-east-1.amazonaws.com/123456789012/finance", false},
		{"arn:aws:sqs:us-east-1:123456789012:finance", false},
		{"arn:aws:sns:us-east-1:123456789012:finance:6c3d5b7e-0f3b-4f6a-9a8e-2b5b0c9d1e2f", false},
		{"arn:aws:sns:us-east-1:1234:finance", false},
		{"arn:aws:sns::123456789012:finance", false},
		{"arn:aws:sns:us-east-1:123456789012:", false},
		{"arn:aws:sns:us-east-1:123456789012:.fifo", false},
		{"arn:aws:sns:us-east-1:123456789012:fin.ance", false},
		{"arn:aws:sns:us-east-1:000000000000:" + strings.Repeat("a", 257), false},
		{"arn:aws:sns:us-east-1:000000000000:" + strings.Repeat("a", 252) + ".fifo", false},
	}
	client := sns.New(sns.Options{Region: "us-east-1"})
	for _, tt := range tests {
		_, err := NewSNS(client, tt.arn)
		if (err == nil) != tt.ok {
			t.Errorf("NewSNS(%q) error = %v, want ok = %v", tt.arn, err, tt.ok)
		}
	}
	if _, err := NewSNS(nil, "arn:aws:sns:us-east-1:123456789012:finance"); err == nil {
		t.Error("NewSNS(nil) succeeded, want an error")
	}
}
