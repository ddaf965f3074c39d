package fakes_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/signature"
)

const secret = "pay-secret"

// send makes a signed request to the provider; a nil body is a lookup,
// signed over the withdrawal id it asks about.
func send(t *testing.T, ctx context.Context, method, url, key string, body []byte) (int, map[string]string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	signed := body
	if body == nil {
		signed = []byte(path.Base(req.URL.Path))
	}
	req.Header.Set(signature.Header, signature.Sign([]byte(secret), time.Now(), signed))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var answer map[string]string
	_ = json.Unmarshal(raw, &answer)
	return resp.StatusCode, answer, nil
}

func payBody(id string) []byte {
	return []byte(`{"withdrawal_id":"` + id + `","user_id":"u","destination":"d-` + id + `"}`)
}

// TestProviderTruth: a payment stands though its answer never reached the
// caller, and the lookup tells it.
func TestProviderTruth(t *testing.T) {
	p := fakes.NewProvider(t, secret)
	p.Decide(func(key string, _ fakes.Payout, n int) (int, time.Duration) {
		switch {
		case key == "w-late" && n == 1:
			return http.StatusOK, 500 * time.Millisecond // pays, answers too late
		case key == "w-late":
			return http.StatusServiceUnavailable, 0
		case key == "w-refused":
			return http.StatusBadRequest, 0
		case key == "w-busy":
			return http.StatusServiceUnavailable, 0
		}
		return http.StatusOK, 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	if _, _, err := send(t, ctx, http.MethodPost, p.URL, "w-late", payBody("w-late")); err == nil {
		t.Fatal("the late answer came within the caller's timeout")
	}
	cancel()
	bg := context.Background()
	if status, _, _ := send(t, bg, http.MethodPost, p.URL, "w-late", payBody("w-late")); status != http.StatusServiceUnavailable {
		t.Fatalf("second call: %d, want the scripted 503", status)
	}
	for _, id := range []string{"w-ok", "w-refused", "w-busy"} {
		_, _, _ = send(t, bg, http.MethodPost, p.URL, id, payBody(id))
	}

	var paid []string
	for _, pm := range p.Payments() {
		paid = append(paid, pm.Key+"="+pm.PayoutID+"@"+pm.WithdrawalID)
	}
	if diff := cmp.Diff([]string{"w-late=po_w-late@w-late", "w-ok=po_w-ok@w-ok"}, paid); diff != "" {
		t.Errorf("payments (-want +got):\n%s", diff)
	}

	for id, want := range map[string]struct {
		status int
		answer map[string]string
	}{
		"w-late":    {200, map[string]string{"status": "paid", "payout_id": "po_w-late"}},
		"w-ok":      {200, map[string]string{"status": "paid", "payout_id": "po_w-ok"}},
		"w-refused": {200, map[string]string{"status": "failed"}},
		"w-busy":    {404, nil},
		"w-never":   {404, nil},
	} {
		status, answer, err := send(t, bg, http.MethodGet, p.URL+"/"+id, "", nil)
		if err != nil || status != want.status || !cmp.Equal(answer, want.answer) {
			t.Errorf("lookup %s: %d %v (%v), want %d %v", id, status, answer, err, want.status, want.answer)
		}
	}
	if p.Lookups() != 5 || p.TotalCalls() != 5 {
		t.Errorf("lookups %d, calls %d: lookups must not count as payout calls", p.Lookups(), p.TotalCalls())
	}
}

func TestFinanceStatuses(t *testing.T) {
	f := fakes.NewFinance(t, "fin-secret")
	for _, m := range []string{`{"withdrawal_id":"w1","status":"failed"}`, `{"withdrawal_id":"w1","status":"paid"}`, `{"withdrawal_id":"w2","status":"paid"}`} {
		var v struct {
			ID     string `json:"withdrawal_id"`
			Status string `json:"status"`
		}
		_ = json.Unmarshal([]byte(m), &v)
		req, _ := http.NewRequest(http.MethodPost, f.URL, strings.NewReader(m))
		req.Header.Set(signature.Header, signature.Sign([]byte("fin-secret"), time.Now(), []byte(m)))
		req.Header.Set("Idempotency-Key", v.ID+":"+v.Status)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	want := map[string][]string{"w1": {"failed", "paid"}, "w2": {"paid"}}
	if diff := cmp.Diff(want, f.Statuses()); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
}
