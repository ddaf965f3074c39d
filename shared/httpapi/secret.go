package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
)

// SameSecret reports whether a presented secret (a token from a header)
// equals the configured one, in time that depends on neither: both are
// hashed to one length first, since subtle.ConstantTimeCompare returns at
// once when the lengths differ and so would tell the secret's length.
func SameSecret(presented, configured string) bool {
	a, b := sha256.Sum256([]byte(presented)), sha256.Sum256([]byte(configured))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
