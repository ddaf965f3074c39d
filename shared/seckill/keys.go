package seckill

import (
	"github.com/hourglass/hourglass/shared/delayq"
)

// An item shard's keys share the hash tag of the item's order-queue shard,
// "<prefix>{dq:sk:<item>:<n>}", so admission (stock, buyers, purchase and the
// order job) is one script on one slot:
//
//	<tag>:meta       hash: version, starts, ends, limit, shards, stock, left,
//	                 pending (orders not made yet), confirmed, released (units
//	                 admitted are stock - left + released)
//	<tag>:users      hash: user -> "<quantity>|<pid>@<shard>,..." (home shard only)
//	<tag>:purchases  hash: purchase id -> record (see decodePurchase)
//	<tag>:holds      sorted set: "<pid>|<quantity>|<user>" by deadline (home only)
//	<tag>:due, :inflight, :dead   the order queue shard (package delayq)
//
// The registry (one key, outside any item's slot) lists the items and their
// shard counts: <prefix>seckill:items, hash item -> shards.
type shardKeys struct {
	delayq.Keys
	Meta, Users, Purchases, Holds string
}

func newShardKeys(k delayq.Keys) shardKeys {
	return shardKeys{Keys: k, Meta: k.Key("meta"), Users: k.Key("users"), Purchases: k.Key("purchases"), Holds: k.Key("holds")}
}

func registryKey(prefix string) string { return prefix + "seckill:items" }
