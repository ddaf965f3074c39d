package finance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/shared/withdrawal"
)

// SNS speaks the awsquery protocol: a form-encoded POST with Action=Publish,
// answered in XML (see the SDK's request_snapshot/Publish.request.snap).
const (
	publishOK = `<PublishResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<PublishResult><MessageId>94f20ce6-13c5-43a0-9a9e-ca52d816e90b</MessageId></PublishResult>
<ResponseMetadata><RequestId>f187a3c1-376f-11df-8963-01868b7c937a</RequestId></ResponseMetadata>
</PublishResponse>`
	publishNotFound = `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<Error><Type>Sender</Type><Code>NotFound</Code><Message>Topic does not exist</Message></Error>
<RequestId>9dd01905-5012-5f99-8663-4b3ecd0dfaef</RequestId>
</ErrorResponse>`
	publishInternal = `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
<Error><Type>Receiver</Type><Code>InternalError</Code><Message>Internal error</Message></Error>
<RequestId>9dd01905-5012-5f99-8663-4b3ecd0dfaf0</RequestId>
</ErrorResponse>`
)

// snsRequest is a Publish call as the server decoded it.
type snsRequest struct {
	form          url.Values
	authorization string
}

// newSNSServer is an SNS endpoint answering every call with status and body; a
// real *sns.Client talks to it.
func newSNSServer(t *testing.T, status int, body string) (*sns.Client, <-chan snsRequest) {
	t.Helper()
	got := make(chan snsRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
			http.Error(w, "unexpected content type "+ct, http.StatusBadRequest)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- snsRequest{form: r.PostForm, authorization: r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "text/xml")
		w.Header().Set("X-Amzn-Requestid", "f187a3c1-376f-11df-8963-01868b7c937a")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	client := sns.New(sns.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", ""),
		Retryer:      aws.NopRetryer{},
		HTTPClient:   srv.Client(),
	})
	return client, got
}

// attributes decodes MessageAttributes.entry.N.{Name,Value.DataType,Value.StringValue}.
func attributes(t *testing.T, form url.Values) map[string][2]string {
	t.Helper()
	attrs := map[string][2]string{}
	for i := 1; ; i++ {
		p := fmt.Sprintf("MessageAttributes.entry.%d.", i)
		name := form.Get(p + "Name")
		if name == "" {
			return attrs
		}
		attrs[name] = [2]string{form.Get(p + "Value.DataType"), form.Get(p + "Value.StringValue")}
	}
}

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
			client, got := newSNSServer(t, http.StatusOK, publishOK)
			s, err := NewSNS(client, tt.topic)
			if err != nil {
				t.Fatalf("NewSNS: %v", err)
			}
			m := message(t, "wd-1")
			if err := s.Notify(context.Background(), m); err != nil {
				t.Fatalf("Notify: %v", err)
			}

			r := <-got
			if !strings.HasPrefix(r.authorization, "AWS4-HMAC-SHA256 ") {
				t.Errorf("Authorization = %q, want a SigV4 signature", r.authorization)
			}
			for name, want := range map[string]string{
				"Action":   "Publish",
				"Version":  "2010-03-31",
				"TopicArn": tt.topic,
			} {
				if got := r.form.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			var msg withdrawal.Processed
			if err := json.Unmarshal([]byte(r.form.Get("Message")), &msg); err != nil {
				t.Fatalf("Message %q does not parse: %v", r.form.Get("Message"), err)
			}
			if diff := cmp.Diff(m, msg); diff != "" {
				t.Errorf("Message (-want +got):\n%s", diff)
			}
			wantAttrs := map[string][2]string{
				"type":          {"String", "payout.processed"},
				"status":        {"String", "paid"},
				"withdrawal_id": {"String", "wd-1"},
			}
			if diff := cmp.Diff(wantAttrs, attributes(t, r.form)); diff != "" {
				t.Errorf("MessageAttributes (-want +got):\n%s", diff)
			}
			var wantGroup, wantDedup []string
			if tt.fifo {
				wantGroup, wantDedup = []string{"wd-1"}, []string{"wd-1"}
			}
			if diff := cmp.Diff(wantGroup, r.form["MessageGroupId"]); diff != "" {
				t.Errorf("MessageGroupId (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantDedup, r.form["MessageDeduplicationId"]); diff != "" {
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
		{"topic not found", http.StatusNotFound, publishNotFound, "NotFound"},
		{"internal error", http.StatusInternalServerError, publishInternal, "InternalError"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, _ := newSNSServer(t, tt.status, tt.body)
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
	client, _ := newSNSServer(t, http.StatusNotFound, publishNotFound)
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
	client, got := newSNSServer(t, http.StatusOK, publishOK)
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
