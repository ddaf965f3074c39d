package payout_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// TestUnansweredCallIsOfUnknownOutcome: only a call that never connected
// surely did not pay; a timeout after connecting, or an answer of any status,
// is told apart from it.
func TestUnansweredCallIsOfUnknownOutcome(t *testing.T) {
	w := withdrawal.Withdrawal{ID: "wd_1", UserID: "u", Amount: decimal.RequireFromString("1"), Currency: "USD", Destination: "d"}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
	}))
	defer slow.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer failing.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()

	for _, tc := range []struct {
		name    string
		url     string
		unknown bool
	}{
		{"timeout after connecting", slow.URL, true},
		{"connection refused", refused, false},
		{"502 answer", failing.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := payout.New(payout.Config{URL: tc.url, Secret: []byte("s"), Timeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Pay(context.Background(), w)
			if err == nil || errors.Is(err, withdrawal.ErrPermanent) {
				t.Fatalf("want a transient error, got %v", err)
			}
			if got := errors.Is(err, withdrawal.ErrOutcomeUnknown); got != tc.unknown {
				t.Fatalf("outcome unknown = %v, want %v (%v)", got, tc.unknown, err)
			}
		})
	}
}
