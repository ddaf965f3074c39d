package finance

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

func TestDedupKey(t *testing.T) {
	tests := []struct {
		status withdrawal.Status
		want   string
	}{
		{withdrawal.Paid, "wd_01J0:paid"},
		{withdrawal.Failed, "wd_01J0:failed"},
		{withdrawal.Returned, "wd_01J0:returned"},
	}
	for _, tt := range tests {
		m := message(t, "wd_01J0")
		m.Status = tt.status
		if got := DedupKey(m); got != tt.want {
			t.Errorf("DedupKey(%s) = %q, want %q", tt.status, got, tt.want)
		}
	}
}

// outcomes is one withdrawal paid, the paid message sent again (a retried
// job), then returned: what finance hears of a payout whose money came back.
func outcomes(t *testing.T, id string) []withdrawal.Processed {
	t.Helper()
	paid := message(t, id)
	returned := message(t, id)
	returned.Status = withdrawal.Returned
	return []withdrawal.Processed{paid, paid, returned}
}

// dedupReceiver keeps the first message under each key and drops repeats,
// as a FIFO topic within its window or any receiver de-duplicating by key.
type dedupReceiver struct {
	mu   sync.Mutex
	seen map[string]bool
	kept []string // the kept messages' statuses, in arrival order
}

func (d *dedupReceiver) receive(key string, status withdrawal.Status) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	if d.seen[key] {
		return
	}
	d.seen[key] = true
	d.kept = append(d.kept, string(status))
}

// A return is its own outcome, never a duplicate of the payment before it:
// on a FIFO topic its de-duplication id, and on every topic its dedup_key
// attribute, is "<withdrawal id>:<status>". The group stays the withdrawal,
// so one withdrawal's messages keep their order.
func TestSNSPaidAndReturnedHaveTheirOwnKeys(t *testing.T) {
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
				t.Fatal(err)
			}
			var byAttr, byFIFO dedupReceiver
			var keys []string
			for _, m := range outcomes(t, "wd-1") {
				if err := s.Notify(context.Background(), m); err != nil {
					t.Fatalf("Notify(%s): %v", m.Status, err)
				}
				r := <-got
				key := r.Attributes()["dedup_key"][1]
				keys = append(keys, key)
				byAttr.receive(key, m.Status)
				if tt.fifo {
					if g := r.Form.Get("MessageGroupId"); g != "wd-1" {
						t.Errorf("%s: MessageGroupId = %q, want the withdrawal id", m.Status, g)
					}
					byFIFO.receive(r.Form.Get("MessageDeduplicationId"), m.Status)
				}
			}
			if diff := cmp.Diff([]string{"wd-1:paid", "wd-1:paid", "wd-1:returned"}, keys); diff != "" {
				t.Errorf("dedup_key attributes (-want +got):\n%s", diff)
			}
			want := []string{"paid", "returned"}
			if diff := cmp.Diff(want, byAttr.kept); diff != "" {
				t.Errorf("kept by dedup_key (-want +got):\n%s", diff)
			}
			if tt.fifo {
				if diff := cmp.Diff(want, byFIFO.kept); diff != "" {
					t.Errorf("kept by MessageDeduplicationId (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// A webhook receiver that de-duplicates by Idempotency-Key (answering a
// repeat 200 without acting on it) takes the payment once and the return
// as well.
func TestWebhookPaidAndReturnedHaveTheirOwnKeys(t *testing.T) {
	var fin dedupReceiver
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m withdrawal.Processed
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		keys = append(keys, key)
		mu.Unlock()
		fin.receive(key, m.Status)
	}))
	t.Cleanup(srv.Close)
	h := newWebhook(t, WebhookConfig{URL: srv.URL})
	for _, m := range outcomes(t, "wd-1") {
		if err := h.Notify(context.Background(), m); err != nil {
			t.Fatalf("Notify(%s): %v", m.Status, err)
		}
	}
	if diff := cmp.Diff([]string{"wd-1:paid", "wd-1:paid", "wd-1:returned"}, keys); diff != "" {
		t.Errorf("Idempotency-Key (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"paid", "returned"}, fin.kept); diff != "" {
		t.Errorf("kept by Idempotency-Key (-want +got):\n%s", diff)
	}
}

// The local stack's JSON line names the key too, for whoever reads the log
// as finance would.
func TestLogLineCarriesDedupKey(t *testing.T) {
	var buf bytes.Buffer
	l := NewLog(&buf)
	var fin dedupReceiver
	for _, m := range outcomes(t, "wd-1") {
		if err := l.Notify(context.Background(), m); err != nil {
			t.Fatalf("Notify(%s): %v", m.Status, err)
		}
	}
	var keys []string
	for _, line := range bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n")) {
		var got struct {
			withdrawal.Processed
			DedupKey string `json:"dedup_key"`
		}
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("line %s does not parse: %v", line, err)
		}
		keys = append(keys, got.DedupKey)
		fin.receive(got.DedupKey, got.Status)
	}
	if diff := cmp.Diff([]string{"wd-1:paid", "wd-1:paid", "wd-1:returned"}, keys); diff != "" {
		t.Errorf("dedup_key (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"paid", "returned"}, fin.kept); diff != "" {
		t.Errorf("kept by dedup_key (-want +got):\n%s", diff)
	}
}
