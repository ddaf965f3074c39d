package delayq

import (
	"strconv"
)

// Keys names the Redis keys of one queue shard. Every key carries the shard's
// hash tag, so all of them (and anything a caller stores beside them with Key)
// live in one cluster slot and one Lua script may touch them together.
type Keys struct {
	// Tag is the common prefix "<prefix>{dq:<queue>:<n>}".
	Tag string
	// Due holds scheduled jobs: member job id, score due time (unix ms).
	Due string
	// Inflight holds claimed jobs: member job id, score lease deadline (unix ms).
	Inflight string
	// Dead holds jobs given up on: member job id, score time of death (unix ms).
	Dead string
	// Lease holds the last lease token handed out (a string): tokens only
	// grow, so a late or repeated ack of an old lease never finishes jobs of
	// a newer one.
	Lease string
}

// KeysOf names the keys of shard n of queue, as New(...).Keys(n) would,
// without building a Queue.
func KeysOf(prefix, queue string, n int) Keys { return newKeys(prefix, queue, n) }

func newKeys(prefix, queue string, shard int) Keys {
	tag := prefix + "{dq:" + queue + ":" + strconv.Itoa(shard) + "}"
	return Keys{Tag: tag, Due: tag + ":due", Inflight: tag + ":inflight", Dead: tag + ":dead", Lease: tag + ":lease"}
}

// Key builds another key in the shard's slot: Tag + ":" + parts joined by ":".
func (k Keys) Key(parts ...string) string {
	n := len(k.Tag)
	for _, p := range parts {
		n += 1 + len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, k.Tag...)
	for _, p := range parts {
		b = append(b, ':')
		b = append(b, p...)
	}
	return string(b)
}
