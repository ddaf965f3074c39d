package signature_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/shared/signature"
)

// FuzzVerify feeds Verify any header a peer could send: it never panics,
// accepts a header only if it carries the right MAC (Sign's, for this
// secret, body and timestamp), and says malformed for what is not
// "t=<digits>,v1=<64 lowercase hex>[,v1=...]".
func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret")
	now := time.Unix(1_795_946_400, 0)
	good := signature.Sign(secret, now, []byte(`{"a":1}`))
	for _, s := range []struct{ header, body string }{
		{good, `{"a":1}`},
		{good + ",v1=" + strings.Repeat("0", 64), `{"a":1}`},
		{good, `{"a":2}`},
		{"t=1795946400,v1=" + strings.Repeat("A", 64), ""},
		{"t=1795946400", ""}, {"v1=00", ""}, {"", ""}, {"t=,v1=", ""}, {"t=1,t=2,v1=x", ""},
		{"t=99999999999999999999,v1=" + strings.Repeat("0", 64), ""}, {"t=-1,v1=" + strings.Repeat("0", 64), ""},
		{" t=1795946400,v1=" + strings.Repeat("0", 64), ""}, {"t=1795946400;v1=x", ""},
	} {
		f.Add(s.header, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		err := signature.Verify(secret, header, body, now, time.Minute)
		if err == nil {
			ts, _, _ := strings.Cut(strings.TrimPrefix(header, "t="), ",")
			if !strings.Contains(header, signature.Sign(secret, unix(t, ts), body)[len("t=")+len(ts)+1:]) {
				t.Fatalf("accepted %q without the body's MAC", header)
			}
			return
		}
		if !errors.Is(err, signature.ErrMalformed) && !errors.Is(err, signature.ErrMismatch) && !errors.Is(err, signature.ErrTimestamp) {
			t.Fatalf("unexpected error %v", err)
		}
		if strings.Contains(err.Error(), string(secret)) {
			t.Fatalf("error %q quotes the secret", err)
		}
		// What Sign makes for this body always verifies.
		if err := signature.Verify(secret, signature.Sign(secret, now, body), body, now, time.Minute); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
	})
}

func unix(t *testing.T, ts string) time.Time {
	t.Helper()
	var sec int64
	for _, c := range ts {
		if c < '0' || c > '9' {
			t.Fatalf("accepted timestamp %q", ts)
		}
		sec = sec*10 + int64(c-'0')
	}
	return time.Unix(sec, 0)
}
