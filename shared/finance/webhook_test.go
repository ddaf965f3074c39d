package finance

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/fakes"
	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/signature"
)

var testSecret = []byte("finance-test-secret-do-not-leak")

func newWebhook(t *testing.T, cfg WebhookConfig) *Webhook {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = testSecret
	}
	h, err := NewWebhook(cfg)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	return h
}

func TestWebhookSendsSignedMessage(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	srv, got := fakes.NewRecorder(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	h := newWebhook(t, WebhookConfig{URL: srv.URL + "/finance/payouts", Clock: clock.NewFake(now)})

	m := message(t, "wd-1")
	if err := h.Notify(context.Background(), m); err != nil {
		t.Fatalf("Notify: %v", err)
	}
	r := <-got
	want, _ := json.Marshal(m)
	if string(r.Body) != string(want) {
		t.Errorf("body = %s, want %s", r.Body, want)
	}
	if r.Method != http.MethodPost {
		t.Errorf("method = %s, want POST", r.Method)
	}
	for name, want := range map[string]string{
		"Content-Type":    "application/json",
		"Idempotency-Key": "wd-1:paid",
	} {
		if got := r.Header.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	sig := r.Header.Get(signature.Header)
	if want := signature.Sign(testSecret, now, want); sig != want {
		t.Errorf("%s = %q, want %q", signature.Header, sig, want)
	}
	if err := signature.Verify(testSecret, sig, r.Body, now, time.Minute); err != nil {
		t.Errorf("signature.Verify: %v", err)
	}
	if err := signature.Verify([]byte("another secret"), sig, r.Body, now, time.Minute); err == nil {
		t.Error("signature verifies under another secret")
	}
}

func TestWebhookStatus(t *testing.T) {
	tests := []struct {
		status int
		ok     bool
	}{
		{http.StatusOK, true},
		{http.StatusAccepted, true},
		{http.StatusNoContent, true},
		{http.StatusMovedPermanently, false},
		{http.StatusFound, false},
		{http.StatusTemporaryRedirect, false},
		{http.StatusBadRequest, false},
		{http.StatusUnauthorized, false},
		{http.StatusNotFound, false},
		{http.StatusRequestTimeout, false},
		{http.StatusTooManyRequests, false},
		{http.StatusInternalServerError, false},
		{http.StatusServiceUnavailable, false},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			var redirected atomic.Bool
			elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Store(true) }))
			t.Cleanup(elsewhere.Close)
			srv, _ := fakes.NewRecorder(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status >= 300 && tt.status < 400 {
					w.Header().Set("Location", elsewhere.URL)
				}
				w.WriteHeader(tt.status)
				// Echo the request's headers the way debugging endpoints do.
				_ = r.Header.Write(w)
			})
			h := newWebhook(t, WebhookConfig{URL: srv.URL})

			err := h.Notify(context.Background(), message(t, "wd-1"))
			if tt.ok {
				if err != nil {
					t.Fatalf("Notify: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Notify succeeded, want an error")
			}
			if !strings.Contains(err.Error(), http.StatusText(tt.status)) {
				t.Errorf("error %q does not name the status", err)
			}
			assertNoSecret(t, err)
			if redirected.Load() {
				t.Error("redirect followed")
			}
		})
	}
}

func TestWebhookTransportErrors(t *testing.T) {
	release := make(chan struct{})
	slow, _ := fakes.NewRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // runs before slow.Close

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	_ = ln.Close() // closed so that nothing listens there

	tests := []struct {
		name string
		url  string
		is   error
	}{
		{"timeout", slow.URL, context.DeadlineExceeded},
		{"connection refused", refused, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newWebhook(t, WebhookConfig{URL: tt.url, Timeout: 100 * time.Millisecond})
			err := h.Notify(context.Background(), message(t, "wd-1"))
			if err == nil {
				t.Fatal("Notify succeeded, want an error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v is not %v", err, tt.is)
			}
			assertNoSecret(t, err)
		})
	}
}

func TestWebhookErrorHidesURLCredentials(t *testing.T) {
	srv, _ := fakes.NewRecorder(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	_ = ln.Close() // closed so that nothing listens there

	for _, host := range []string{strings.TrimPrefix(srv.URL, "http://"), refused} {
		h := newWebhook(t, WebhookConfig{URL: "http://finance:pa55word@" + host + "/hook?token=t0ken"})
		err := h.Notify(context.Background(), message(t, "wd-1"))
		if err == nil {
			t.Fatal("Notify succeeded, want an error")
		}
		for _, s := range []string{"pa55word", "t0ken"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error %q contains %q", err, s)
			}
		}
	}
}

func TestWebhookLeavesCallerClientAlone(t *testing.T) {
	c := &http.Client{}
	newWebhook(t, WebhookConfig{URL: "http://finance.example/hook", HTTPClient: c})
	if c.CheckRedirect != nil {
		t.Error("NewWebhook changed the caller's client")
	}
}

func TestNewWebhookRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  WebhookConfig
	}{
		{"no url", WebhookConfig{Secret: testSecret}},
		{"relative url", WebhookConfig{URL: "/hook", Secret: testSecret}},
		{"not http", WebhookConfig{URL: "ftp://finance.example/hook", Secret: testSecret}},
		{"bad url", WebhookConfig{URL: "http://[::1", Secret: testSecret}},
		{"no secret", WebhookConfig{URL: "https://finance.example/hook"}},
		{"negative timeout", WebhookConfig{URL: "https://finance.example/hook", Secret: testSecret, Timeout: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewWebhook(tt.cfg); err == nil {
				t.Fatal("NewWebhook succeeded, want an error")
			} else {
				assertNoSecret(t, err)
			}
		})
	}
}

// assertNoSecret fails if err shows the secret or any part of a signature.
func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if strings.Contains(err.Error(), string(testSecret)) {
		t.Errorf("error %q contains the secret", err)
	}
	if mac := hexMAC.FindString(err.Error()); mac != "" || strings.Contains(err.Error(), "v1=") {
		t.Errorf("error %q contains a signature", err)
	}
}

// hexMAC matches a hex HMAC-SHA256.
var hexMAC = regexp.MustCompile(`[0-9a-f]{64}`)
