// Package signature signs outbound HTTP bodies (the payout call, the finance
// webhook) so that receivers can tell them from forgeries and replays.
//
// The header value is "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
// Binding the timestamp into the MAC lets a receiver reject old captures;
// several v1 entries let a sender sign with both secrets during a rotation.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header carries the signature.
const Header = "X-Hourglass-Signature"

// DefaultTolerance is used by Verify when it is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Verify outcomes.
var (
	// ErrMalformed: the header is not "t=<digits>,v1=<64 lowercase hex>[,v1=…]".
	ErrMalformed = errors.New("signature: malformed header")
	// ErrTimestamp: the signature is authentic but too old or too far in the
	// future (a replay, or clocks apart).
	ErrTimestamp = errors.New("signature: timestamp outside tolerance")
	// ErrMismatch: no v1 entry matches the body under the secret.
	ErrMismatch = errors.New("signature: mismatch")
)

// Sign returns the header value for body, signed at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

// Verify checks header against body. The MAC is checked before the time, so
// ErrTimestamp means an authentic but stale (or future) request. A tolerance
// of 0 or less means DefaultTolerance: a receiver cannot opt out of replay
// protection by accident.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return errors.New("signature: empty secret")
	}
	ts, sigs, err := parse(header)
	if err != nil {
		return err
	}
	want := mac(secret, ts, body)
	matched := false
	for _, s := range sigs {
		// Check every entry, so timing tells nothing about which one matched.
		if hmac.Equal(s, want) {
			matched = true
		}
	}
	if !matched {
		return ErrMismatch
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, _ := strconv.ParseInt(ts, 10, 64) // parse checked it
	// In whole seconds, not as a Duration: a timestamp centuries away would
	// overflow one (and the overflow would pass for "now").
	limit := int64(tolerance / time.Second)
	switch age := now.Unix() - sec; {
	case sec > now.Unix()+limit:
		return fmt.Errorf("%w: signed %ds in the future, tolerance %s", ErrTimestamp, sec-now.Unix(), tolerance)
	case age > limit:
		return fmt.Errorf("%w: signed %ds ago, tolerance %s", ErrTimestamp, age, tolerance)
	}
	return nil
}

// SignedAt is the time header says it was signed at (its t). It means
// something only of a header Verify accepted, which bounds it by the
// tolerance.
func SignedAt(header string) (time.Time, error) {
	ts, _, err := parse(header)
	if err != nil {
		return time.Time{}, err
	}
	sec, _ := strconv.ParseInt(ts, 10, 64) // parse checked it
	return time.Unix(sec, 0).UTC(), nil
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// parse splits header into its timestamp (as signed: plain decimal digits)
// and its decoded v1 MACs. Anything unexpected is ErrMalformed: a lenient
// parser is where signature schemes usually break.
func parse(header string) (ts string, sigs [][]byte, err error) {
	if header == "" {
		return "", nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	for i, part := range strings.Split(header, ",") {
		key, val, ok := strings.Cut(part, "=")
		if !ok {
			return "", nil, fmt.Errorf("%w: part %d is not key=value", ErrMalformed, i+1)
		}
		switch key {
		case "t":
			if ts != "" {
				return "", nil, fmt.Errorf("%w: more than one t", ErrMalformed)
			}
			if !digits(val) {
				return "", nil, fmt.Errorf("%w: t is not unix seconds", ErrMalformed)
			}
			if _, err := strconv.ParseInt(val, 10, 64); err != nil {
				return "", nil, fmt.Errorf("%w: t is out of range", ErrMalformed)
			}
			ts = val
		case "v1":
			if len(val) != 2*sha256.Size || !lowerHex(val) {
				return "", nil, fmt.Errorf("%w: v1 is not %d lowercase hex digits", ErrMalformed, 2*sha256.Size)
			}
			b, _ := hex.DecodeString(val) // lowerHex checked it
			sigs = append(sigs, b)
		default:
			return "", nil, fmt.Errorf("%w: unknown key in part %d", ErrMalformed, i+1)
		}
	}
	if ts == "" {
		return "", nil, fmt.Errorf("%w: no t", ErrMalformed)
	}
	if len(sigs) == 0 {
		return "", nil, fmt.Errorf("%w: no v1", ErrMalformed)
	}
	return ts, sigs, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
