package seckill

import (
	"github.com/hourglass/hourglass/shared/delayq"
)

// An item shard's keys share the hash tag of the item's order-queue shard,
// "<prefix>{dq:sk:<item>:<n>}", so admission (stock, buyer and the order job)
// is one script on one slot:
//
//	<tag>:meta       hash: version, starts, ends, limit, shards, stock,
//	                 left:<version> (the stock left under that version),
//	                 confirmed, released (units admitted are
//	                 stock - left + released; units waiting for their order
//	                 stock - left - confirmed); and what preheats and the
//	                 compensation pass mark: frozen (the version of the
//	                 preheat under way that froze the shard), left_aside
//	                 (the stock left while the shard is frozen or retired:
//	                 out of left:<version>, so admission finds none), fence
//	                 (a preheat rolled back by another container may not
//	                 freeze the shard again), dropped (the version of the
//	                 preheat that left the shard without a sale), retired
//	                 (not polled: see retire.lua)
//	<tag>:users      hash: user -> "<quantity>|<pid>@<shard>:<quantity>[!],..."
//	                 (home shard only; shard "-" while held, "!" once released)
//	<tag>:purchases  hash: purchase id -> record (see decodePurchase): the
//	                 purchases settled, re-enqueued or taken from another
//	                 shard; one made on its buyer's home shard has none while
//	                 it is reserved (its buyer's entry and order job say it all)
//	<tag>:holds      sorted set: "<pid>|<quantity>|<user>" by deadline (home only)
//	<tag>:due, :inflight, :dead   the order queue shard (package delayq); an
//	                 order job is "<pid>|<quantity>|<home>|<user>"
//
// Outside any shard's slot:
//
//	<prefix>seckill:items      the registry, hash item -> "<shards>/<polled>/<version>":
//	                           the sale's shard count, the shards whose order
//	                           queues the poller drains (more than the sale's
//	                           while shards of an earlier sale still hold
//	                           jobs), the version of the preheat that
//	                           registered it (an entry of the first layout
//	                           is "<shards>")
//	<prefix>{sk:<item>}:preheat  the item's preheat intent (see preheat_begin.lua)
//	<prefix>seckill:preheats   sorted set: items with a preheat intent, by its
//	                           deadline (where the compensation pass looks)
//	<prefix>{dq:seckill-events:<n>}:...  the events queue (EventsQueue)
type shardKeys struct {
	delayq.Keys
	Meta, Users, Purchases, Holds string
	// admit is the admit script's keys, built once.
	admit []string
}

func newShardKeys(k delayq.Keys) shardKeys {
	s := shardKeys{Keys: k, Meta: k.Key("meta"), Users: k.Key("users"), Purchases: k.Key("purchases"), Holds: k.Key("holds")}
	s.admit = []string{s.Meta, s.Users, s.Holds, s.Due}
	return s
}

func registryKey(prefix string) string { return prefix + "seckill:items" }

func intentKey(prefix, item string) string { return prefix + "{sk:" + item + "}:preheat" }

func intentIndexKey(prefix string) string { return prefix + "seckill:preheats" }
