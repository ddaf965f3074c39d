package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/signature"
)

var (
	secret = []byte("whsec_test")
	body   = []byte(`{"a":1}`)
	signed = time.Unix(1700000000, 0)
)

// Computed independently:
// printf '%s' '1700000000.{"a":1}' | openssl dgst -sha256 -hmac whsec_test -hex
const vectorMAC = "38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"

func TestSignKnownVector(t *testing.T) {
	got := signature.Sign(secret, signed, body)
	want := "t=1700000000,v1=" + vectorMAC
	if got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	// Sub-second precision and zone do not change the signature.
	if got := signature.Sign(secret, signed.Add(999*time.Millisecond).In(time.FixedZone("X", 3600)), body); got != want {
		t.Fatalf("Sign with fraction and zone = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	valid := signature.Sign(secret, signed, body)
	other := signature.Sign([]byte("old-secret"), signed, body)
	otherMAC := strings.TrimPrefix(other, "t=1700000000,v1=")
	zeros := strings.Repeat("0", 64)

	tests := []struct {
		name      string
		secret    []byte
		header    string
		body      []byte
		now       time.Time
		tolerance time.Duration
		want      error // nil, or a sentinel errors.Is must find
	}{
		{name: "valid", header: valid},
		{name: "valid, clock a bit behind", header: valid, now: signed.Add(-30 * time.Second)},
		{name: "valid at the tolerance edge", header: valid, now: signed.Add(5 * time.Minute)},
		{name: "valid at the future edge", header: valid, now: signed.Add(-5 * time.Minute)},
		{name: "rotation: second v1 matches", header: "t=1700000000,v1=" + otherMAC + ",v1=" + vectorMAC},
		{name: "rotation: first v1 matches", header: "t=1700000000,v1=" + vectorMAC + ",v1=" + otherMAC},
		{name: "v1 before t", header: "v1=" + vectorMAC + ",t=1700000000"},
		{name: "zero tolerance means the default", header: valid, now: signed.Add(4 * time.Minute), tolerance: -1},

		{name: "tampered body", header: valid, body: []byte(`{"a":2}`), want: signature.ErrMismatch},
		{name: "body with trailing newline", header: valid, body: []byte("{\"a\":1}\n"), want: signature.ErrMismatch},
		{name: "wrong secret", header: valid, secret: []byte("whsec_other"), want: signature.ErrMismatch},
		{name: "timestamp changed", header: "t=1700000001,v1=" + vectorMAC, now: signed, want: signature.ErrMismatch},
		{name: "rotation: no v1 matches", header: "t=1700000000,v1=" + otherMAC + ",v1=" + zeros, want: signature.ErrMismatch},
		{name: "stale", header: valid, now: signed.Add(5*time.Minute + time.Second), want: signature.ErrTimestamp},
		{name: "stale under a short tolerance", header: valid, now: signed.Add(11 * time.Second), tolerance: 10 * time.Second, want: signature.ErrTimestamp},
		{name: "future", header: valid, now: signed.Add(-6 * time.Minute), want: signature.ErrTimestamp},
		{name: "stale and forged is a mismatch", header: "t=1600000000,v1=" + vectorMAC, want: signature.ErrMismatch},

		{name: "empty", header: "", want: signature.ErrMalformed},
		{name: "no t", header: "v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "no v1", header: "t=1700000000", want: signature.ErrMalformed},
		{name: "empty t", header: "t=,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "t not a number", header: "t=abc,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "t with sign", header: "t=+1700000000,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "t negative", header: "t=-1700000000,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "t fractional", header: "t=1700000000.5,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "t overflows", header: "t=99999999999999999999,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "two t", header: "t=1700000000,t=1700000000,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "v1 too short", header: "t=1700000000,v1=" + vectorMAC[:62], want: signature.ErrMalformed},
		{name: "v1 too long", header: "t=1700000000,v1=" + vectorMAC + "00", want: signature.ErrMalformed},
		{name: "v1 uppercase", header: "t=1700000000,v1=" + strings.ToUpper(vectorMAC), want: signature.ErrMalformed},
		{name: "v1 not hex", header: "t=1700000000,v1=" + strings.Repeat("g", 64), want: signature.ErrMalformed},
		{name: "empty v1", header: "t=1700000000,v1=", want: signature.ErrMalformed},
		{name: "space after comma", header: "t=1700000000, v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "spaces around =", header: "t = 1700000000,v1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "trailing comma", header: valid + ",", want: signature.ErrMalformed},
		{name: "leading comma", header: "," + valid, want: signature.ErrMalformed},
		{name: "part without =", header: "t=1700000000,v1", want: signature.ErrMalformed},
		{name: "unknown key", header: valid + ",v0=" + zeros, want: signature.ErrMalformed},
		{name: "key case", header: "T=1700000000,V1=" + vectorMAC, want: signature.ErrMalformed},
		{name: "semicolons", header: "t=1700000000;v1=" + vectorMAC, want: signature.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, b, now, tol := secret, body, signed, 5*time.Minute
			if tt.secret != nil {
				s = tt.secret
			}
			if tt.body != nil {
				b = tt.body
			}
			if !tt.now.IsZero() {
				now = tt.now
			}
			if tt.tolerance != 0 {
				tol = tt.tolerance
			}
			err := signature.Verify(s, tt.header, b, now, tol)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestVerifyRoundTrip(t *testing.T) {
	bodies := [][]byte{nil, {}, []byte("plain text"), []byte("with, commas=and,v1=equals"), make([]byte, 1<<16)}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, b := range bodies {
		h := signature.Sign(secret, now, b)
		if err := signature.Verify(secret, h, b, now, time.Minute); err != nil {
			t.Errorf("Verify(Sign(%d bytes)): %v", len(b), err)
		}
	}
}

func TestVerifyEmptySecret(t *testing.T) {
	h := signature.Sign(nil, signed, body)
	err := signature.Verify(nil, h, body, signed, time.Minute)
	if err == nil {
		t.Fatal("Verify with an empty secret passed")
	}
	if errors.Is(err, signature.ErrMalformed) || errors.Is(err, signature.ErrMismatch) {
		t.Fatalf("Verify with an empty secret = %v, want a configuration error", err)
	}
}

func TestVerifyErrorsDoNotEchoHeader(t *testing.T) {
	for _, h := range []string{
		"t=1700000000,v1=" + vectorMAC + ",x=" + vectorMAC,
		"t=1700000000,v1=" + strings.Repeat("0", 64),
	} {
		err := signature.Verify(secret, h, []byte("other"), signed, time.Minute)
		if err == nil || strings.Contains(err.Error(), vectorMAC) || strings.Contains(err.Error(), "0000000000") {
			t.Errorf("Verify(%q) = %v", h, err)
		}
	}
}

// TestVerifyFarTimestamps: timestamps whose distance from now does not fit a
// time.Duration (about 292 years) must fail the window check, not wrap
// around to "now", whatever the tolerance.
func TestVerifyFarTimestamps(t *testing.T) {
	now := time.Unix(1700000000, 0)
	signedAt := func(ts string) string {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(ts + "."))
		m.Write(body)
		return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
	}
	years292 := int64(292 * 365.25 * 24 * 3600)
	tests := []struct {
		name, ts  string
		tolerance time.Duration
		want      error
	}{
		{"max int64 seconds", strconv.FormatInt(math.MaxInt64, 10), 5 * time.Minute, signature.ErrTimestamp},
		{"max int64 seconds, max tolerance", strconv.FormatInt(math.MaxInt64, 10), math.MaxInt64, signature.ErrTimestamp},
		{"292 years ahead", strconv.FormatInt(now.Unix()+years292, 10), 5 * time.Minute, signature.ErrTimestamp},
		{"293 years ahead", strconv.FormatInt(now.Unix()+years292+365*24*3600, 10), 5 * time.Minute, signature.ErrTimestamp},
		{"zero (1970)", "0", 5 * time.Minute, signature.ErrTimestamp},
		{"negative", "-1", 5 * time.Minute, signature.ErrMalformed},
		{"min int64", strconv.FormatInt(math.MinInt64, 10), 5 * time.Minute, signature.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := signature.Verify(secret, signedAt(tt.ts), body, now, tt.tolerance)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify(t=%s) = %v, want %v", tt.ts, err, tt.want)
			}
		})
	}
	// Signed with Sign itself, far ahead: the same.
	if err := signature.Verify(secret, signature.Sign(secret, now.Add(math.MaxInt64), body), body, now, 0); !errors.Is(err, signature.ErrTimestamp) {
		t.Fatalf("Verify(Sign(now+maxDuration)) = %v, want ErrTimestamp", err)
	}
}

// TestSignedAt: the time a header says it was signed at, to the second;
// a header that is not one is an error.
func TestSignedAt(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 999_000_000, time.UTC)
	got, err := signature.SignedAt(signature.Sign([]byte("k"), at, []byte("{}")))
	if err != nil || !got.Equal(at.Truncate(time.Second)) {
		t.Fatalf("SignedAt = %s, %v; want %s", got, err, at.Truncate(time.Second))
	}
	for _, bad := range []string{"", "t=abc,v1=00", "v1=" + strings.Repeat("0", 64)} {
		if _, err := signature.SignedAt(bad); err == nil {
			t.Errorf("SignedAt(%q) = nil error", bad)
		}
	}
}
