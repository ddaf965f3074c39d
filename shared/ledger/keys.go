package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/hourglass/hourglass/shared/delayq"
)

// Withdrawal records live beside their queue shard, in its hash slot, so that
// a create and its schedule (or a retry and its re-schedule) are one script.
//
//	<tag>:w:<id>          hash: the withdrawal record
//	<tag>:u:<user>:w      sorted set: the user's withdrawal ids (lex order)
//	<tag>:idem            hash: the idempotency entries, field the digest of
//	                      user and key (16 bytes), value "<state p|d>|
//	                      <fingerprint, 24 characters>|<id>|<lock deadline
//	                      while pending, due time of the first answer once
//	                      done>|<expiry>" (times unix ms in base 36): under
//	                      80 bytes; the first answer is rebuilt from the
//	                      record rather than kept (see Redis.Reserve)
//	<tag>:idem-purge      string: where the purge of <tag>:idem stands (an
//	                      HSCAN cursor)
//	<tag>:idem:<digest>   hash: an idempotency record of the first layout
//	<tag>:idem-exp        sorted set: the first layout's record names by
//	                      expiry; both are read and purged, never written
//	<tag>:open            sorted set: withdrawals not done with (not final,
//	                      or final and finance not told), by when to look at
//	                      them again: due time, attempt deadline, or outcome
//
// where <tag> is the shard's "<prefix>{dq:withdrawals:<n>}".
func recordKey(k delayq.Keys, id string) string { return k.Key("w", id) }

func userIndexKey(k delayq.Keys, userID string) string { return k.Key("u", userID, "w") }

// idemDigest names a user's idempotency key: its field in idemSetKey is the
// digest's 16 bytes, the name of its record in the first layout (idemKey)
// has them in hex.
func idemDigest(userID, key string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(userID)))
	h.Write(n[:]) // the length keeps ("ab","c") and ("a","bc") apart
	h.Write([]byte(userID))
	h.Write([]byte(key))
	return string(h.Sum(nil)[:16])
}

// idemSetKey holds the shard's idempotency entries: one hash rather than a
// key per entry, and no expiry index (the entries carry their expiry), is
// most of what a withdrawal costs in memory.
func idemSetKey(k delayq.Keys) string { return k.Key("idem") }

func idemPurgeKey(k delayq.Keys) string { return k.Key("idem-purge") }

// idemKey is a key's record in the first layout.
func idemKey(k delayq.Keys, digest string) string {
	return k.Key("idem", hex.EncodeToString([]byte(digest)))
}

// fingerprintKept is how much of a request's fingerprint (a SHA-256 in hex)
// an idempotency entry keeps (reserve.lua and create.lua cut the first
// layout's to it too): 96 bits tell a user's two bodies under one key apart
// as surely, in 40 fewer bytes.
const fingerprintKept = 24

func keptFingerprint(fp string) string {
	if len(fp) > fingerprintKept {
		return fp[:fingerprintKept]
	}
	return fp
}

func idemExpiryKey(k delayq.Keys) string { return k.Key("idem-exp") }

func openKey(k delayq.Keys) string { return k.Key("open") }
