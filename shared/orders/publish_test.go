package orders

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/secrets"
	"github.com/hourglass/hourglass/shared/signature"
)

var testSecret = []byte("orders-test-secret-do-not-leak")

func event(orderID, typ string) Event {
	return Event{Type: typ, OrderID: orderID, PurchaseID: "p_1", ItemID: "sku-1", UserID: "u_1", Quantity: 2,
		Amount: "19.98", Currency: "CNY", At: "2026-12-01T10:00:00.250Z"}
}

func TestEventWireForm(t *testing.T) {
	b, err := encode(event("o_1", Paid))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"order.paid","order_id":"o_1","purchase_id":"p_1","item_id":"sku-1","user_id":"u_1",` +
		`"quantity":2,"amount":"19.98","currency":"CNY","at":"2026-12-01T10:00:00.250Z"}`
	if string(b) != want {
		t.Errorf("wire form\n got %s\nwant %s", b, want)
	}
	if k := event("o_1", Paid).Key(); k != "o_1:order.paid" {
		t.Errorf("Key = %q", k)
	}
	// Two payments to refund are two events: their keys differ.
	r1, r2 := event("o_1", RefundRequired), event("o_1", RefundRequired)
	r1.PaymentEventID, r2.PaymentEventID = "evt_1", "evt_2"
	if r1.Key() != "o_1:payment.refund_required:evt_1" || r1.Key() == r2.Key() {
		t.Errorf("refund keys %q and %q, want one per payment event", r1.Key(), r2.Key())
	}
	if b, err := json.Marshal(r1); err != nil || !strings.Contains(string(b), `"payment_event_id":"evt_1"`) {
		t.Errorf("refund wire form %s (%v), want its payment_event_id", b, err)
	}
}

// Every publisher refuses an event a subscriber could not de-duplicate, and
// sends nothing for it.
func TestPublishersRefuseEventsWithoutKey(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { posts.Add(1) }))
	t.Cleanup(srv.Close)
	hook, err := NewWebhook(WebhookConfig{URL: srv.URL, Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	client, got := fakes.NewSNS(t, http.StatusOK, fakes.SNSPublishOK)
	topic, err := NewSNS(client, "arn:aws:sns:us-east-1:123456789012:orders")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := NewLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	for _, e := range []Event{event("", Created), event("o_1", "")} {
		for name, p := range map[string]Publisher{"webhook": hook, "sns": topic, "log": log} {
			if err := p.Publish(context.Background(), e); err == nil {
				t.Errorf("%s published %+v, want an error", name, e)
			}
		}
	}
	if posts.Load() != 0 || len(got) != 0 || buf.Len() != 0 {
		t.Errorf("sent %d posts, %d publishes, log %q; want nothing", posts.Load(), len(got), buf.String())
	}
}

func TestLogWritesOneJSONLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	want := []Event{event("o_1", Created), event("o_1", Expired)}
	for _, e := range want {
		if err := l.Publish(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, line := range lines {
		var got struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Key   string `json:"key"`
			Event Event  `json:"event"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if got.Msg != LogMessage || got.Level != "INFO" || got.Key != want[i].Key() {
			t.Errorf("line %d: level %q msg %q key %q", i, got.Level, got.Msg, got.Key)
		}
		if diff := cmp.Diff(want[i], got.Event); diff != "" {
			t.Errorf("line %d event (-want +got):\n%s", i, diff)
		}
	}
}

func TestLogConcurrentPublishWritesWholeLines(t *testing.T) {
	const n = 64
	var buf bytes.Buffer // not safe for concurrent use: -race checks slog's handler locks
	l := NewLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := l.Publish(context.Background(), event(fmt.Sprintf("o_%03d", i), Created)); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
		var got struct{ Event Event }
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("torn line %q: %v", line, err)
		}
		seen[got.Event.OrderID] = true
	}
	if len(seen) != n {
		t.Errorf("%d distinct orders logged, want %d", len(seen), n)
	}
}

func TestWebhookSendsSignedEvent(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	srv, got := fakes.NewRecorder(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	h, err := NewWebhook(WebhookConfig{URL: srv.URL + "/orders", Secret: testSecret, Clock: clock.NewFake(now)})
	if err != nil {
		t.Fatal(err)
	}
	e := event("o_1", Paid)
	if err := h.Publish(context.Background(), e); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	r := <-got
	want, _ := json.Marshal(e)
	if r.Method != http.MethodPost || string(r.Body) != string(want) {
		t.Errorf("%s %s, want POST %s", r.Method, r.Body, want)
	}
	for name, want := range map[string]string{"Content-Type": "application/json", "Idempotency-Key": "o_1:order.paid"} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	sig := r.Header.Get(signature.Header)
	if err := signature.Verify(testSecret, sig, r.Body, now, 5*time.Minute); err != nil {
		t.Errorf("signature.Verify: %v", err)
	}
	if err := signature.Verify([]byte("another secret"), sig, r.Body, now, 5*time.Minute); err == nil {
		t.Error("signature verifies under another secret")
	}
}

func TestWebhookStatus(t *testing.T) {
	for _, tt := range []struct {
		status int
		ok     bool
	}{
		{http.StatusOK, true}, {http.StatusAccepted, true}, {http.StatusNoContent, true},
		{http.StatusFound, false}, {http.StatusBadRequest, false}, {http.StatusUnauthorized, false},
		{http.StatusForbidden, false}, {http.StatusConflict, false}, {http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false}, {http.StatusServiceUnavailable, false},
	} {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv, got := fakes.NewRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "http://elsewhere.invalid/")
				}
				w.WriteHeader(tt.status)
				_ = r.Header.Write(w) // echo the signature the way debugging endpoints do
			})
			h, err := NewWebhook(WebhookConfig{URL: srv.URL, Secret: testSecret})
			if err != nil {
				t.Fatal(err)
			}
			err = h.Publish(context.Background(), event("o_1", Created))
			if tt.ok != (err == nil) {
				t.Fatalf("Publish = %v, want ok %v", err, tt.ok)
			}
			if err != nil {
				if !strings.Contains(err.Error(), http.StatusText(tt.status)) || !strings.Contains(err.Error(), "o_1:order.created") {
					t.Errorf("error %q names neither the status nor the event", err)
				}
				if strings.Contains(err.Error(), string(testSecret)) || strings.Contains(err.Error(), "v1=") {
					t.Errorf("error %q shows the secret or the signature", err)
				}
			}
			if n := len(got); n != 1 {
				t.Errorf("%d posts, want 1 (a fixed secret is never resent)", n)
			}
		})
	}
}

func TestWebhookTimeoutIsAnError(t *testing.T) {
	release := make(chan struct{})
	srv, _ := fakes.NewRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) })
	h, err := NewWebhook(WebhookConfig{URL: srv.URL, Secret: testSecret, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Publish(context.Background(), event("o_1", Created)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish = %v, want a deadline error", err)
	}
}

// The receiver moved to a new key before the function read it: the event
// refused 401 is sent once more, signed with the key read again. A refusal
// under the key just read is not resent.
func TestWebhookResendsOnceWithARotatedKey(t *testing.T) {
	const id = "hourglass/orders-signing"
	var (
		mu     sync.Mutex
		accept = "ord-B"
		keys   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		if signature.Verify([]byte(accept), r.Header.Get(signature.Header), body, time.Now(), time.Minute) != nil {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	t.Cleanup(srv.Close)
	posts := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), keys...) }
	store := fakes.NewSecretStore(map[string]string{id: "ord-A"})
	src := secrets.NewCached(store, id, secrets.CachedOptions{Clock: clock.NewFake(time.Now())})
	if _, err := src.Keys(context.Background()); err != nil {
		t.Fatal(err)
	}
	h, err := NewWebhook(WebhookConfig{URL: srv.URL, Keys: src})
	if err != nil {
		t.Fatal(err)
	}
	store.Set(id, `{"current":"ord-B","previous":"ord-A"}`)
	if err := h.Publish(context.Background(), event("o_1", Paid)); err != nil {
		t.Fatalf("Publish after the rotation: %v", err)
	}
	if diff := cmp.Diff([]string{"o_1:order.paid", "o_1:order.paid"}, posts()); diff != "" {
		t.Fatalf("posts (-want +got):\n%s", diff)
	}
	mu.Lock()
	accept = "ord-C"
	mu.Unlock()
	if err := h.Publish(context.Background(), event("o_1", Paid)); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Publish with a key the receiver refuses: %v; want the 401", err)
	}
	if n := len(posts()); n != 3 {
		t.Fatalf("%d posts; want 3 (no resend under the same key)", n)
	}
}

func TestNewWebhookRejects(t *testing.T) {
	for name, cfg := range map[string]WebhookConfig{
		"no url":    {Secret: testSecret},
		"not http":  {URL: "ftp://orders.example/hook", Secret: testSecret},
		"no secret": {URL: "https://orders.example/hook"},
	} {
		if _, err := NewWebhook(cfg); err == nil {
			t.Errorf("%s: NewWebhook succeeded", name)
		}
	}
}

func TestSNSPublishes(t *testing.T) {
	for _, tt := range []struct {
		topic string
		fifo  bool
	}{
		{"arn:aws:sns:us-east-1:123456789012:orders", false},
		{"arn:aws:sns:us-east-1:123456789012:orders.fifo", true},
	} {
		t.Run(tt.topic, func(t *testing.T) {
			client, got := fakes.NewSNS(t, http.StatusOK, fakes.SNSPublishOK)
			s, err := NewSNS(client, tt.topic)
			if err != nil {
				t.Fatal(err)
			}
			e := event("o_1", RefundRequired)
			if err := s.Publish(context.Background(), e); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			r := <-got
			if !strings.HasPrefix(r.Authorization, "AWS4-HMAC-SHA256 ") {
				t.Errorf("Authorization = %q, want SigV4", r.Authorization)
			}
			if r.Form.Get("Action") != "Publish" || r.Form.Get("TopicArn") != tt.topic {
				t.Errorf("Action %q TopicArn %q", r.Form.Get("Action"), r.Form.Get("TopicArn"))
			}
			var msg Event
			if err := json.Unmarshal([]byte(r.Form.Get("Message")), &msg); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(e, msg); diff != "" {
				t.Errorf("Message (-want +got):\n%s", diff)
			}
			wantAttrs := map[string][2]string{
				"type":      {"String", "payment.refund_required"},
				"dedup_key": {"String", "o_1:payment.refund_required"},
			}
			if diff := cmp.Diff(wantAttrs, r.Attributes()); diff != "" {
				t.Errorf("MessageAttributes (-want +got):\n%s", diff)
			}
			var group, dedup []string
			if tt.fifo {
				group, dedup = []string{"o_1"}, []string{"o_1:payment.refund_required"}
			}
			if diff := cmp.Diff(group, r.Form["MessageGroupId"]); diff != "" {
				t.Errorf("MessageGroupId (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(dedup, r.Form["MessageDeduplicationId"]); diff != "" {
				t.Errorf("MessageDeduplicationId (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSNSErrors(t *testing.T) {
	client, _ := fakes.NewSNS(t, http.StatusNotFound, fakes.SNSPublishNotFound)
	s, err := NewSNS(client, "arn:aws:sns:us-east-1:123456789012:orders")
	if err != nil {
		t.Fatal(err)
	}
	err = s.Publish(context.Background(), event("o_1", Created))
	var nf *types.NotFoundException
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "o_1:order.created") {
		t.Fatalf("error %v: want the typed NotFound naming the event", err)
	}
	client, _ = fakes.NewSNS(t, http.StatusInternalServerError, fakes.SNSPublishInternal)
	s, _ = NewSNS(client, "arn:aws:sns:us-east-1:123456789012:orders")
	if err := s.Publish(context.Background(), event("o_1", Created)); err == nil || !strings.Contains(err.Error(), "InternalError") {
		t.Fatalf("error %v: want the InternalError", err)
	}
	if _, err := NewSNS(client, "arn:aws:sqs:us-east-1:123456789012:orders"); err == nil {
		t.Error("NewSNS took a queue's arn")
	}
	if _, err := NewSNS(nil, "arn:aws:sns:us-east-1:123456789012:orders"); err == nil {
		t.Error("NewSNS took no client")
	}
}

// recorder is a publisher that notes what it was told and fails on demand.
type recorder struct {
	name string
	fail error
	log  *[]string
}

func (r recorder) Publish(_ context.Context, e Event) error {
	*r.log = append(*r.log, r.name+":"+e.Key())
	return r.fail
}

func TestAllTellsEveryPublisherInOrder(t *testing.T) {
	var log []string
	a := All{recorder{name: "topic", log: &log}, recorder{name: "webhook", log: &log}}
	if err := a.Publish(context.Background(), event("o_1", Created)); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"topic:o_1:order.created", "webhook:o_1:order.created"}, log); diff != "" {
		t.Fatalf("told (-want +got):\n%s", diff)
	}
	refused := errors.New("refused")
	for _, a := range []All{
		{recorder{name: "topic", fail: refused, log: &log}, recorder{name: "webhook", log: &log}},
		{recorder{name: "topic", log: &log}, recorder{name: "webhook", fail: refused, log: &log}},
	} {
		if err := a.Publish(context.Background(), event("o_2", Paid)); !errors.Is(err, refused) {
			t.Errorf("Publish = %v, want the refusal: the event must be sent again", err)
		}
	}
}
