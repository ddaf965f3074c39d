package payout_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode"

	"github.com/hourglass/hourglass/shared/clock"
	"github.com/hourglass/hourglass/shared/payout"
	"github.com/hourglass/hourglass/shared/signature"
	"github.com/hourglass/hourglass/shared/withdrawal"
)

// fuzzAnswer is a RoundTripper that answers every call with a fixed response,
// optionally echoing the request's signature header into the body (some
// servers echo headers back).
type fuzzAnswer struct {
	status   int
	body     []byte
	location string
	echo     bool
}

func (a fuzzAnswer) RoundTrip(req *http.Request) (*http.Response, error) {
	body := a.body
	if a.echo {
		body = append(append(bytes.Clone(body), req.Header.Get(signature.Header)...), body...)
	}
	h := http.Header{}
	if a.location != "" {
		h.Set("Location", a.location)
	}
	return &http.Response{
		StatusCode: a.status, Status: http.StatusText(a.status), Header: h,
		Body: io.NopCloser(bytes.NewReader(body)), Request: req,
	}, nil
}

// FuzzPayResponse: whatever the provider answers, Pay never panics, calls a
// 2xx paid, any other status a failure carrying that status (permanent for
// 4xx but 408 and 429), and its error text is one clean line that quotes
// neither the secret nor the signature.
func FuzzPayResponse(f *testing.F) {
	for _, s := range []struct {
		status   int
		body     string
		location string
		echo     bool
	}{
		{200, `{"payout_id":"po_123"}`, "", false},
		{201, `{"payout_id":123}`, "", false},
		{204, ``, "", false},
		{200, `not json`, "", false},
		{200, `{"payout_id":"a\u0000b\nc\u202e"}`, "", false},
		{302, ``, "https://elsewhere.example/\u202ex", false},
		{400, `{"error":"bad destination"}`, "", true},
		{408, ``, "", false}, {429, `slow down`, "", false},
		{500, "\x1b[31mboom\x1b[0m\n" + strings.Repeat("x", 300), "", true},
		{503, ``, "", false}, {99, ``, "", false}, {999, `?`, "", false},
	} {
		f.Add(s.status, []byte(s.body), s.location, s.echo)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, location string, echo bool) {
		if status < 100 || status > 999 {
			t.Skip("not an HTTP status")
		}
		if strings.ContainsFunc(location, unicode.IsControl) {
			t.Skip("no HTTP response carries a control character in a header")
		}
		c, err := payout.New(payout.Config{
			URL: "https://provider.example/v1/payouts", Secret: secret, Clock: clock.NewFake(start),
			HTTPClient: &http.Client{Transport: fuzzAnswer{status, body, location, echo}},
		})
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.Pay(context.Background(), testWithdrawal())
		if status >= 200 && status <= 299 {
			if err != nil {
				t.Fatalf("%d answered %v, want paid", status, err)
			}
			if len(id) > payout.MaxPayoutID || strings.ContainsFunc(id, func(r rune) bool {
				return unicode.IsControl(r) || unicode.In(r, unicode.Cf) || r == unicode.ReplacementChar
			}) {
				t.Fatalf("payout id %q kept: it goes to the ledger, finance and logs", id)
			}
			return
		}
		var pe *payout.Error
		if !errors.As(err, &pe) || id != "" {
			t.Fatalf("%d answered id %q, %v; want a *payout.Error", status, id, err)
		}
		// A redirect whose Location Go's client cannot even parse ends the
		// call before we see the status: a transient failure like any 3xx.
		redirect := status >= 300 && status <= 399 && pe.Status == 0 && !pe.Permanent
		if pe.Status != status && !redirect {
			t.Fatalf("%d answered id %q, %v; want a *payout.Error with the status", status, id, err)
		}
		notVerdict := status == 401 || status == 403 || status == 409
		wantPermanent := status >= 400 && status <= 499 && status != 408 && status != 429 && !notVerdict
		if pe.Permanent != wantPermanent || errors.Is(err, withdrawal.ErrPermanent) != wantPermanent {
			t.Fatalf("%d permanent %v, want %v", status, pe.Permanent, wantPermanent)
		}
		if got := errors.Is(err, withdrawal.ErrRejected) || errors.Is(err, withdrawal.ErrOutcomeUnknown); got != notVerdict && !redirect {
			t.Fatalf("%d taken for a verdict on the payout: %v (%v)", status, !got, err)
		}
		msg := err.Error()
		if strings.ContainsFunc(msg, func(r rune) bool { return unicode.IsControl(r) || unicode.In(r, unicode.Cf) }) {
			t.Fatalf("error text holds control characters: %q", msg)
		}
		if len(msg) > 1024 {
			t.Fatalf("error text of %d bytes", len(msg))
		}
		if strings.Contains(msg, string(secret)) || strings.Contains(msg, signature.Sign(secret, start, []byte(wantBody))[20:]) {
			t.Fatalf("error text quotes a secret: %q", msg)
		}
	})
}
