package payout_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"github.com/shopspring/decimal"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

var (
	secret = []byte("sk_test_9f8e7d6c5b4a")
	start  = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
)

const wantBody = `{"withdrawal_id":"wd_01J0TEST","user_id":"u_42","amount":"12.50","currency":"EUR","destination":"DE89370400440532013000"}`

func testWithdrawal() withdrawal.Withdrawal {
	return withdrawal.Withdrawal{
		ID:          "wd_01J0TEST",
		UserID:      "u_42",
		Shard:       3,
		Status:      withdrawal.Processing,
		Amount:      decimal.RequireFromString("12.5"),
		Currency:    "EUR",
		Destination: "DE89370400440532013000",
		Attempts:    1,
	}
}

// captured is one request as the provider saw it.
type captured struct {
	Method string
	Path   string
	Header http.Header
	Body   string
}

// recorder keeps every request a test server receives.
type recorder struct {
	mu   sync.Mutex
	reqs []captured
}

func (rec *recorder) wrap(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, captured{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: string(b)})
		rec.mu.Unlock()
		next(w, r)
	}
}

func (rec *recorder) all() []captured {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]captured(nil), rec.reqs...)
}

// serve starts a provider running h and records what it receives.
func serve(t *testing.T, h http.HandlerFunc) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec.wrap(h))
	t.Cleanup(srv.Close)
	return srv, rec
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func newClient(t *testing.T, url string, opts ...func(*payout.Config)) (*payout.Client, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(start)
	cfg := payout.Config{URL: url, Secret: secret, Clock: clk}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := payout.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, clk
}

// kind classifies an outcome the way the payout step does.
func kind(err error) string {
	switch {
	case err == nil:
		return "paid"
	case errors.Is(err, withdrawal.ErrPermanent):
		return "permanent"
	case errors.Is(err, withdrawal.ErrRejected):
		return "rejected"
	case errors.Is(err, withdrawal.ErrOutcomeUnknown):
		return "unknown"
	default:
		return "transient"
	}
}

func TestPayRequest(t *testing.T) {
	srv, rec := serve(t, answer(http.StatusOK, `{"payout_id":"po_123"}`))
	c, _ := newClient(t, srv.URL+"/v1/payouts")

	id, err := c.Pay(t.Context(), testWithdrawal())
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	if id != "po_123" {
		t.Errorf("payout id = %q, want po_123", id)
	}
	reqs := rec.all()
	if len(reqs) != 1 {
		t.Fatalf("provider got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Method != http.MethodPost || r.Path != "/v1/payouts" {
		t.Errorf("request = %s %s, want POST /v1/payouts", r.Method, r.Path)
	}
	if r.Body != wantBody {
		t.Errorf("body:\n got %s\nwant %s", r.Body, wantBody)
	}
	got := map[string]string{}
	for _, h := range []string{"Content-Type", "Idempotency-Key", "User-Agent", signature.Header} {
		got[h] = r.Header.Get(h)
	}
	want := map[string]string{
		"Content-Type":    "application/json",
		"Idempotency-Key": "wd_01J0TEST",
		"User-Agent":      "hourglass/1",
		signature.Header:  signature.Sign(secret, start, []byte(wantBody)),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	if err := signature.Verify(secret, r.Header.Get(signature.Header), []byte(r.Body), start, time.Minute); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	if err := signature.Verify([]byte("another secret"), r.Header.Get(signature.Header), []byte(r.Body), start, time.Minute); !errors.Is(err, signature.ErrMismatch) {
		t.Errorf("signature verifies under another secret: %v", err)
	}
}

func TestPayAmountFormat(t *testing.T) {
	tests := []struct {
		amount, currency, want string
	}{
		{"12.5", "EUR", "12.50"},
		{"1000", "JPY", "1000"},
		{"0.1", "KWD", "0.100"},
	}
	for _, tt := range tests {
		t.Run(tt.currency, func(t *testing.T) {
			srv, rec := serve(t, answer(http.StatusOK, ""))
			c, _ := newClient(t, srv.URL)
			w := testWithdrawal()
			w.Amount, w.Currency = decimal.RequireFromString(tt.amount), tt.currency
			if _, err := c.Pay(t.Context(), w); err != nil {
				t.Fatalf("Pay: %v", err)
			}
			if want := `"amount":"` + tt.want + `"`; !strings.Contains(rec.all()[0].Body, want) {
				t.Errorf("body %s lacks %s", rec.all()[0].Body, want)
			}
		})
	}
}

func TestPayRetriesKeepIdempotencyKey(t *testing.T) {
	statuses := []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusOK}
	var n atomic.Int32
	srv, rec := serve(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(statuses[n.Add(1)-1])
	})
	c, clk := newClient(t, srv.URL)

	var stamps []time.Time
	for i, status := range statuses {
		stamps = append(stamps, clk.Now())
		_, err := c.Pay(t.Context(), testWithdrawal())
		wantKind := "transient"
		if status == http.StatusOK {
			wantKind = "paid"
		}
		if got := kind(err); got != wantKind {
			t.Fatalf("call %d (%d): %s (%v), want %s", i+1, status, got, err, wantKind)
		}
		clk.Advance(30 * time.Second << i)
	}
	reqs := rec.all()
	if len(reqs) != len(statuses) {
		t.Fatalf("provider got %d requests, want %d", len(reqs), len(statuses))
	}
	for i, r := range reqs {
		if k := r.Header.Get("Idempotency-Key"); k != "wd_01J0TEST" {
			t.Errorf("call %d: Idempotency-Key = %q", i+1, k)
		}
		if r.Body != wantBody {
			t.Errorf("call %d: body changed: %s", i+1, r.Body)
		}
		// Each retry is signed afresh, so a strict receiver accepts it.
		if err := signature.Verify(secret, r.Header.Get(signature.Header), []byte(r.Body), stamps[i], time.Second); err != nil {
			t.Errorf("call %d: signature: %v", i+1, err)
		}
	}
}

func TestPayClassification(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		wantKind string
		wantID   string
	}{
		{name: "200 with payout_id", status: 200, body: `{"payout_id":"po_1","status":"paid"}`, wantKind: "paid", wantID: "po_1"},
		{name: "200 empty", status: 200, wantKind: "paid"},
		{name: "200 not JSON", status: 200, body: "OK", wantKind: "paid"},
		{name: "200 JSON without payout_id", status: 200, body: `{"id":"x"}`, wantKind: "paid"},
		{name: "200 payout_id not a string", status: 200, body: `{"payout_id":42}`, wantKind: "paid"},
		{name: "200 JSON array", status: 200, body: `["po_1"]`, wantKind: "paid"},
		{name: "201 with payout_id", status: 201, body: `{"payout_id":"po_2"}`, wantKind: "paid", wantID: "po_2"},
		{name: "202", status: 202, body: `{"payout_id":"po_3"}`, wantKind: "paid", wantID: "po_3"},
		{name: "204", status: 204, wantKind: "paid"},

		{name: "400", status: 400, body: `{"error":"bad iban"}`, wantKind: "permanent"},
		// Our credentials, not the payout: never a verdict.
		{name: "401", status: 401, wantKind: "rejected"},
		{name: "403", status: 403, wantKind: "rejected"},
		{name: "404", status: 404, wantKind: "permanent"},
		// The provider still processes the key: it may pay.
		{name: "409", status: 409, body: `{"error":"conflict"}`, wantKind: "unknown"},
		{name: "422", status: 422, body: `{"error":"insufficient funds"}`, wantKind: "permanent"},
		{name: "499 unknown 4xx", status: 499, wantKind: "permanent"},

		{name: "408", status: 408, wantKind: "transient"},
		{name: "429", status: 429, body: "slow down", wantKind: "transient"},
		{name: "500", status: 500, body: "oops", wantKind: "transient"},
		{name: "502", status: 502, wantKind: "transient"},
		{name: "503", status: 503, wantKind: "transient"},
		{name: "504", status: 504, wantKind: "transient"},
		{name: "599 unknown 5xx", status: 599, wantKind: "transient"},
		{name: "300", status: 300, wantKind: "transient"},
		{name: "304", status: 304, wantKind: "transient"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, answer(tt.status, tt.body))
			c, _ := newClient(t, srv.URL)
			id, err := c.Pay(t.Context(), testWithdrawal())
			if got := kind(err); got != tt.wantKind {
				t.Fatalf("Pay = %q, %v: %s, want %s", id, err, got, tt.wantKind)
			}
			if id != tt.wantID {
				t.Errorf("payout id = %q, want %q", id, tt.wantID)
			}
			if err == nil {
				return
			}
			var pe *payout.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not a *payout.Error", err)
			}
			if pe.Status != tt.status || pe.Permanent != (tt.wantKind == "permanent") {
				t.Errorf("Error{Status: %d, Permanent: %t}, want %d, %t", pe.Status, pe.Permanent, tt.status, tt.wantKind == "permanent")
			}
			prefix := fmt.Sprintf("payout: provider answered %d", tt.status)
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
			if tt.body != "" && !strings.HasSuffix(err.Error(), ": "+tt.body) {
				t.Errorf("error %q does not end with the body %q", err, tt.body)
			}
		})
	}
}

func TestPayErrorMessage(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   string
	}{
		{400, "", "payout: provider answered 400 Bad Request"},
		{400, "  \n", "payout: provider answered 400 Bad Request"},
		{422, "line one\nline two\ttab", "payout: provider answered 422 Unprocessable Entity: line one line two tab"},
		{503, "\x1b[31mred\x1b[0m\x00", "payout: provider answered 503 Service Unavailable: [31mred[0m"},
		{500, "bidi \u202egnp.exe", "payout: provider answered 500 Internal Server Error: bidi gnp.exe"},
		{500, "bad utf8 \xff\xfe!", "payout: provider answered 500 Internal Server Error: bad utf8 !"},
		{500, strings.Repeat("a", 199) + "é", "payout: provider answered 500 Internal Server Error: " + strings.Repeat("a", 199)},
		{499, strings.Repeat("z", 5000), "payout: provider answered 499: " + strings.Repeat("z", 200)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			srv, _ := serve(t, answer(tt.status, tt.body))
			c, _ := newClient(t, srv.URL)
			_, err := c.Pay(t.Context(), testWithdrawal())
			if err == nil || err.Error() != tt.want {
				t.Errorf("error:\n got %q\nwant %q", err, tt.want)
			}
		})
	}
}

func TestPayErrorNeverLeaksSecret(t *testing.T) {
	// A provider that echoes everything back, secret included.
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, "bad request; you sent %s=%s; key %s; also %s",
			signature.Header, r.Header.Get(signature.Header), secret, strings.Repeat("-", 300))
	})
	c, _ := newClient(t, srv.URL)
	_, err := c.Pay(t.Context(), testWithdrawal())
	if kind(err) != "permanent" {
		t.Fatalf("Pay: %v, want permanent", err)
	}
	sig := signature.Sign(secret, start, []byte(wantBody))
	_, mac, _ := strings.Cut(sig, "v1=")
	msg := err.Error()
	for _, leak := range []string{string(secret), sig, mac, mac[:16]} {
		if strings.Contains(msg, leak) {
			t.Errorf("error %q contains %q", msg, leak)
		}
	}
	if !strings.Contains(msg, "[redacted]") {
		t.Errorf("error %q shows no redaction", msg)
	}

	// The request body (bank data) is never part of an error either.
	c2, _ := newClient(t, "http://127.0.0.1:1/pay")
	_, err = c2.Pay(t.Context(), testWithdrawal())
	for _, leak := range []string{string(secret), "DE89370400440532013000"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("network error %q contains %q", err, leak)
		}
	}
}

func TestPayDoesNotFollowRedirects(t *testing.T) {
	for _, status := range []int{301, 302, 303, 307, 308} {
		for _, own := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d/own client %t", status, own), func(t *testing.T) {
				var followed atomic.Int32
				mux := http.NewServeMux()
				mux.HandleFunc("/pay", func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, "/elsewhere", status)
				})
				mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, _ *http.Request) {
					followed.Add(1)
					_, _ = io.WriteString(w, `{"payout_id":"po_wrong"}`)
				})
				srv := httptest.NewServer(mux)
				t.Cleanup(srv.Close)

				hc := &http.Client{}
				c, _ := newClient(t, srv.URL+"/pay", func(cfg *payout.Config) {
					if own {
						cfg.HTTPClient = hc
					}
				})
				id, err := c.Pay(t.Context(), testWithdrawal())
				if kind(err) != "transient" || id != "" {
					t.Fatalf("Pay = %q, %v, want a transient error", id, err)
				}
				if n := followed.Load(); n != 0 {
					t.Errorf("redirect followed %d times", n)
				}
				var pe *payout.Error
				if !errors.As(err, &pe) || pe.Status != status {
					t.Errorf("error %v, want status %d", err, status)
				}
				if !strings.Contains(err.Error(), `redirect to "/elsewhere" not followed`) {
					t.Errorf("error %q does not name the redirect", err)
				}
				if hc.CheckRedirect != nil {
					t.Error("New changed the caller's http.Client")
				}
			})
		}
	}
}

func TestPayTimeout(t *testing.T) {
	release := make(chan struct{})
	srv, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers
	c, _ := newClient(t, srv.URL, func(cfg *payout.Config) { cfg.Timeout = 50 * time.Millisecond })

	began := time.Now()
	_, err := c.Pay(t.Context(), testWithdrawal())
	// The request was sent and no answer came: it may have paid.
	if kind(err) != "unknown" {
		t.Fatalf("Pay: %v, want unknown", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Pay took %s with a 50ms timeout", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Errorf("error %q does not name the timeout", err)
	}
}

func TestPayCallerCancelled(t *testing.T) {
	srv, rec := serve(t, answer(http.StatusOK, ""))
	c, _ := newClient(t, srv.URL)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Pay(ctx, testWithdrawal())
	// Cancelled before anything was sent: it surely did not pay.
	if kind(err) != "transient" || !errors.Is(err, context.Canceled) {
		t.Fatalf("Pay: %v, want transient, context.Canceled", err)
	}
	if strings.Contains(err.Error(), "no answer within") {
		t.Errorf("error %q blames the provider for the caller's cancel", err)
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("provider got %d requests", n)
	}
}

func TestPayConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	c, _ := newClient(t, "http://user:hunter2@"+addr+"/pay?token=t0k3n#frag")
	_, err = c.Pay(t.Context(), testWithdrawal())
	if kind(err) != "transient" {
		t.Fatalf("Pay: %v, want transient", err)
	}
	var pe *payout.Error
	if !errors.As(err, &pe) || pe.Status != 0 {
		t.Errorf("error %v, want a *payout.Error with status 0", err)
	}
	if want := "payout: call provider: post http://" + addr + "/pay: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q does not start with %q", err, want)
	}
	for _, leak := range []string{"hunter2", "t0k3n", "user"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("error %q contains %q from the url", err, leak)
		}
	}
}

// countingTransport counts the response body bytes the client reads.
type countingTransport struct {
	read atomic.Int64
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &ct.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestPayHugeResponse(t *testing.T) {
	const huge = 256 << 20 // far more than the client may read
	tests := []struct {
		status   int
		prefix   string
		wantKind string
	}{
		{200, `{"payout_id":"po_big","pad":"`, "paid"},
		{500, "", "transient"},
		{400, "", "permanent"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			var wrote atomic.Int64
			srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.prefix)
				chunk := []byte(strings.Repeat("x", 32<<10))
				for wrote.Load() < huge {
					n, err := w.Write(chunk)
					wrote.Add(int64(n))
					if err != nil {
						return // the client hung up, as it should
					}
				}
			})
			ct := &countingTransport{}
			c, _ := newClient(t, srv.URL, func(cfg *payout.Config) { cfg.HTTPClient = &http.Client{Transport: ct} })

			id, err := c.Pay(t.Context(), testWithdrawal())
			if kind(err) != tt.wantKind || id != "" {
				t.Fatalf("Pay = %q, %v, want %s without an id (the JSON is cut off)", id, err, tt.wantKind)
			}
			if n := ct.read.Load(); n > 2*64<<10 {
				t.Errorf("client read %d bytes of the body, want at most %d", n, 2*64<<10)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("error is %d bytes long", len(err.Error()))
			}
		})
	}
}

func TestPayRejectsBadIDs(t *testing.T) {
	srv, rec := serve(t, answer(http.StatusOK, ""))
	c, _ := newClient(t, srv.URL)
	for _, id := range []string{"", "wd 1", "wd\r\nX-Evil: 1", "wd\x00", "wdé"} {
		w := testWithdrawal()
		w.ID = id
		if _, err := c.Pay(t.Context(), w); kind(err) != "permanent" {
			t.Errorf("Pay(id %q) = %v, want permanent", id, err)
		}
	}
	if n := len(rec.all()); n != 0 {
		t.Errorf("provider got %d requests", n)
	}
}

func TestPayConcurrent(t *testing.T) {
	srv, rec := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, `{"payout_id":"po_%s"}`, r.Header.Get("Idempotency-Key"))
	})
	c, _ := newClient(t, srv.URL)
	const n = 16
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			w := testWithdrawal()
			w.ID = fmt.Sprintf("wd_%02d", i)
			ids[i], errs[i] = c.Pay(t.Context(), w)
		})
	}
	close(gate)
	wg.Wait()
	for i := range n {
		if want := fmt.Sprintf("po_wd_%02d", i); errs[i] != nil || ids[i] != want {
			t.Errorf("call %d = %q, %v, want %q", i, ids[i], errs[i], want)
		}
	}
	if got := len(rec.all()); got != n {
		t.Errorf("provider got %d requests, want %d", got, n)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     payout.Config
		wantErr bool
	}{
		{name: "http", cfg: payout.Config{URL: "http://127.0.0.1:9/pay", Secret: secret}},
		{name: "https", cfg: payout.Config{URL: "https://payouts.example.com/v1/payouts", Secret: secret}},
		{name: "upper-case scheme", cfg: payout.Config{URL: "HTTPS://payouts.example.com", Secret: secret}},
		{name: "ipv6", cfg: payout.Config{URL: "http://[::1]:8080/pay", Secret: secret}},
		{name: "timeout", cfg: payout.Config{URL: "http://localhost/pay", Secret: secret, Timeout: time.Second}},

		{name: "empty url", cfg: payout.Config{Secret: secret}, wantErr: true},
		{name: "no scheme", cfg: payout.Config{URL: "payouts.example.com/pay", Secret: secret}, wantErr: true},
		{name: "host:port without scheme", cfg: payout.Config{URL: "localhost:8080/pay", Secret: secret}, wantErr: true},
		{name: "relative", cfg: payout.Config{URL: "/pay", Secret: secret}, wantErr: true},
		{name: "ftp", cfg: payout.Config{URL: "ftp://payouts.example.com/pay", Secret: secret}, wantErr: true},
		{name: "mailto", cfg: payout.Config{URL: "mailto:ops@example.com", Secret: secret}, wantErr: true},
		{name: "no host", cfg: payout.Config{URL: "http:///pay", Secret: secret}, wantErr: true},
		{name: "port only", cfg: payout.Config{URL: "https://:443/pay", Secret: secret}, wantErr: true},
		{name: "scheme only", cfg: payout.Config{URL: "https://", Secret: secret}, wantErr: true},
		{name: "opaque", cfg: payout.Config{URL: "http:payouts.example.com", Secret: secret}, wantErr: true},
		{name: "does not parse", cfg: payout.Config{URL: "http://exa mple.com/pay", Secret: secret}, wantErr: true},
		{name: "control char", cfg: payout.Config{URL: "http://example.com/\x7f", Secret: secret}, wantErr: true},
		{name: "no secret", cfg: payout.Config{URL: "http://localhost/pay"}, wantErr: true},
		{name: "negative timeout", cfg: payout.Config{URL: "http://localhost/pay", Secret: secret, Timeout: -time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := payout.New(tt.cfg)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("New(%q) passed", tt.cfg.URL)
				}
				if strings.Contains(err.Error(), string(secret)) {
					t.Errorf("error %q contains the secret", err)
				}
				return
			}
			if err != nil || c == nil {
				t.Fatalf("New(%q): %v", tt.cfg.URL, err)
			}
		})
	}
}

func TestNewHidesURLCredentials(t *testing.T) {
	_, err := payout.New(payout.Config{URL: "ftp://admin:hunter2@example.com/pay?key=k3y", Secret: secret})
	if err == nil {
		t.Fatal("New passed")
	}
	for _, leak := range []string{"hunter2", "k3y"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("error %q contains %q", err, leak)
		}
	}
}

func TestNewCopiesSecret(t *testing.T) {
	srv, rec := serve(t, answer(http.StatusOK, ""))
	s := []byte("mutable-secret")
	c, err := payout.New(payout.Config{URL: srv.URL, Secret: s, Clock: clock.NewFake(start)})
	if err != nil {
		t.Fatal(err)
	}
	copy(s, "XXXXXXX")
	if _, err := c.Pay(t.Context(), testWithdrawal()); err != nil {
		t.Fatal(err)
	}
	r := rec.all()[0]
	if err := signature.Verify([]byte("mutable-secret"), r.Header.Get(signature.Header), []byte(r.Body), start, time.Minute); err != nil {
		t.Errorf("signed with a changed secret: %v", err)
	}
}

func TestErrorUnwrap(t *testing.T) {
	cause := errors.New("dial tcp: refused")
	tests := []struct {
		name          string
		err           *payout.Error
		wantPermanent bool
		wantCause     bool
	}{
		{name: "permanent", err: &payout.Error{Status: 400, Permanent: true, Msg: "x"}, wantPermanent: true},
		{name: "transient status", err: &payout.Error{Status: 503, Msg: "x"}},
		{name: "transient network", err: &payout.Error{Msg: "x", Err: cause}, wantCause: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wrapped := fmt.Errorf("attempt 2: %w", tt.err)
			if got := errors.Is(wrapped, withdrawal.ErrPermanent); got != tt.wantPermanent {
				t.Errorf("errors.Is(ErrPermanent) = %t", got)
			}
			if got := errors.Is(wrapped, cause); got != tt.wantCause {
				t.Errorf("errors.Is(cause) = %t", got)
			}
			if tt.err.Error() != "payout: x" {
				t.Errorf("Error() = %q", tt.err.Error())
			}
		})
	}
}

func noControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.In(r, unicode.Cc, unicode.Cf) }) < 0
}

func TestPayErrorHasNoControlChars(t *testing.T) {
	body := "\x1b]0;pwned\x07\r\x1b[2K\u200b\u202e\x85" + strings.Repeat("\x01", 300)
	for _, status := range []int{301, 400, 500} {
		srv, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "/x\u202e")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		})
		c, _ := newClient(t, srv.URL)
		_, err := c.Pay(t.Context(), testWithdrawal())
		if err == nil || !noControl(err.Error()) {
			t.Errorf("%d: error %q has control characters", status, err)
		}
	}
}
