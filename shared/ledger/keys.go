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
//	<tag>:idem:<digest>   hash: an idempotency record (digest of user and key)
//	<tag>:idem-exp        sorted set: idempotency record names by expiry
//	<tag>:open            sorted set: withdrawals not done with (not final,
//	                      or final and finance not told), by when to look at
//	                      them again: due time, attempt deadline, or outcome
//
// where <tag> is the shard's "<prefix>{dq:withdrawals:<n>}".
func recordKey(k delayq.Keys, id string) string { return k.Key("w", id) }

func userIndexKey(k delayq.Keys, userID string) string { return k.Key("u", userID, "w") }

func idemKey(k delayq.Keys, userID, key string) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(userID)))
	h.Write(n[:]) // the length keeps ("ab","c") and ("a","bc") apart
	h.Write([]byte(userID))
	h.Write([]byte(key))
	return k.Key("idem", hex.EncodeToString(h.Sum(nil)[:16]))
}

func idemExpiryKey(k delayq.Keys) string { return k.Key("idem-exp") }

func openKey(k delayq.Keys) string { return k.Key("open") }
