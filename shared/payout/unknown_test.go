package payout_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
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
	_ = l.Close()

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

// TestNoSilentResend: a request the provider acted on whose connection then
// broke is never resent behind the caller's back. net/http resends requests
// with an Idempotency-Key on a broken connection; the resend's answer (here
// 503) would stand for a first request that paid. Found by the model
// checker (internal/modelcheck): paid at the provider, failed in the ledger.
func TestNoSilentResend(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound) // and the connection stays open
			return
		}
		if requests.Add(1) == 1 {
			// Paid, then the connection drops before the answer.
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := payout.New(payout.Config{URL: srv.URL, Secret: []byte("s"), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := withdrawal.Withdrawal{ID: "wd_1", UserID: "u", Amount: decimal.RequireFromString("1"), Currency: "USD", Destination: "d"}
	// A warm connection first: net/http resends only on a reused one.
	_, _ = c.Lookup(context.Background(), w)
	_, err = c.Pay(context.Background(), w)
	if !errors.Is(err, withdrawal.ErrOutcomeUnknown) {
		t.Fatalf("a request that may have paid answered %v, want an unknown outcome", err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("the provider got %d requests for one Pay", n)
	}
}
