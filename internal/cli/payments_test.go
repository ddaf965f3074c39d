package cli

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/proctest"
	"github.com/hourglass/hourglass/internal/redistest"
)

// TestServePaymentWindow is the README's flash sale with a payment window
// (2 seconds here, 30 there): two buyers, one pays with a confirmation
// signed by `hourglass sign --for payments`, the other does not; once the
// window has passed the second's order is expired and a third buyer gets the
// unit; each step's order event is logged as a JSON line.
func TestServePaymentWindow(t *testing.T) {
	rs := redistest.Start(t)
	s := serve(t, proctest.FreeAddr(t), map[string]string{"REDIS_URL": rs.URL(), "HOURGLASS_POLL_INTERVAL": "100ms"})
	admin := map[string]string{"X-Admin-Token": "dev-admin"}
	if r := s.do(http.MethodPut, "/v1/seckill/items/tea", "", admin,
		`{"stock":2,"ends_at":"2030-01-01T00:00:00Z","price":"9.99","currency":"CNY","payment_window_seconds":2}`); r.status != 200 {
		t.Fatalf("preheat: %d %s", r.status, r.raw)
	}
	for _, u := range []string{"ann", "ben"} {
		if r := s.do(http.MethodPost, "/v1/seckill/items/tea/purchases", u, nil, ""); r.status != 202 {
			t.Fatalf("purchase of %s: %d %s", u, r.status, r.raw)
		}
	}
	mine := func(u string) reply { return s.do(http.MethodGet, "/v1/seckill/items/tea/purchases/me", u, nil, "") }
	waitFor(t, 10*time.Second, "both orders awaiting payment", func() bool {
		return mine("ann").body["status"] == "awaiting_payment" && mine("ben").body["status"] == "awaiting_payment"
	})
	ann := mine("ann").body
	if ann["amount"] != "9.99" || ann["currency"] != "CNY" || ann["pay_by"] == nil {
		t.Fatalf("ann's purchase: %v", ann)
	}
	body := `{"event_id":"pay_1","order_id":"` + ann["order_id"].(string) + `","status":"succeeded","amount":"9.99","currency":"CNY"}`
	sign := exec.Command(proctest.Build(t, hourglassPkg), "sign", "--for", "payments")
	sign.Stdin = strings.NewReader(body)
	sig, err := sign.Output()
	if err != nil {
		t.Fatalf("hourglass sign: %v", err)
	}
	r := s.do(http.MethodPost, "/v1/webhooks/payments", "", map[string]string{"X-Hourglass-Signature": strings.TrimSpace(string(sig))}, body)
	if r.status != 200 || r.body["status"] != "paid" || r.body["refund_required"] != false {
		t.Fatalf("ann's payment: %d %s", r.status, r.raw)
	}
	if r := s.do(http.MethodPost, "/v1/seckill/items/tea/purchases", "cat", nil, ""); r.status != http.StatusGone {
		t.Fatalf("cat before ben's order expires: %d %s", r.status, r.raw)
	}
	waitFor(t, 15*time.Second, "ben's order expired", func() bool { return mine("ben").body["status"] == "expired" })
	// The unit is back (a container that saw the item sold out remembers
	// it for HOURGLASS_SOLDOUT_MEMORY, 1 s).
	waitFor(t, 10*time.Second, "cat admitted after ben's order expired", func() bool {
		r := s.do(http.MethodPost, "/v1/seckill/items/tea/purchases", "cat", nil, "")
		if r.status != 202 && r.status != http.StatusGone {
			t.Fatalf("cat after ben's order expired: %d %s", r.status, r.raw)
		}
		return r.status == 202
	})
	if st := mine("ann").body["status"]; st != "paid" {
		t.Fatalf("ann: %v", st)
	}
	waitFor(t, 10*time.Second, "the order events logged", func() bool {
		out, _ := os.ReadFile(s.log)
		return bytes.Contains(out, []byte(`"type":"order.paid"`)) && bytes.Contains(out, []byte(`"type":"order.expired"`)) &&
			bytes.Count(out, []byte(`"type":"order.created"`)) == 3
	})
}
