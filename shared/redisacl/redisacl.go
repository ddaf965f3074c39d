// Package redisacl is the one source of each function's Redis rules: the
// keys it may touch and the commands it may send, rendered as the access
// string of its ElastiCache RBAC user (and of ACL SETUSER, which the tests
// run against a real redis-server).
//
// An access string here keeps to what both ElastiCache and ACL SETUSER
// accept: on|off, ~pattern, -@all, +command and +command|subcommand. It has
// no read-only key patterns (%R~) and no selectors, so a function that
// writes any key of a family may write every key of it: families are cut so
// that the one which matters, the withdrawals, is out of the flash-sale
// function's reach altogether. Redis 7 checks every redis.call inside a
// script against the same rules, so a script is no way around them.
package redisacl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The functions, by the names infra gives them.
const (
	Enqueue  = "enqueue"
	Seckill  = "seckill"
	Poller   = "poller"
	Consumer = "consumer"
	Operator = "operator"
)

// Functions lists every function that has a Redis user, in a fixed order.
func Functions() []string { return []string{Enqueue, Seckill, Poller, Consumer, Operator} }

// UserName is fn's Redis user name (ElastiCache: 1 to 40 characters, a
// letter first, letters, digits and hyphens).
func UserName(fn string) string { return "hourglass-" + fn }

// DefaultUser is the access string of the user named "default", which every
// ElastiCache user group must hold: switched off, allowed nothing, so a
// client that connects without a user name gets nowhere.
const DefaultUser = "off -@all"

// Key families, each a glob under the key prefix (HOURGLASS_REDIS_PREFIX).
// The names are those of the packages that own the keys (delayq, ledger,
// seckill, ratelimit); keys_test.go checks real keys against them.
const (
	// withdrawalKeys: the withdrawal queue shards "{dq:withdrawals:<n>}" and
	// what the Redis ledger keeps beside them (records, user indexes,
	// idempotency entries, the open set).
	withdrawalKeys = "{dq:withdrawals:*"
	// itemKeys: a flash-sale item's shards "{dq:sk:<item>:<n>}": stock,
	// buyers, purchases, holds, its order queue, and the Redis order
	// ledger's orders and payment terms.
	itemKeys = "{dq:sk:*"
	// eventKeys: the flash sale's events queue.
	eventKeys = "{dq:seckill-events:*"
	// registryKey: the items' registry, which names the order queues.
	registryKey = "seckill:items"
	// intentKeys, intentIndexKey: the preheats under way ("{sk:<item>}:preheat")
	// and their index by deadline.
	intentKeys     = "{sk:*"
	intentIndexKey = "seckill:preheats"
	// orderIndexKey: the Redis order ledger's index, order id -> shard.
	orderIndexKey = "seckill:orders"
	// rateKeys: the API's rate limits ("rl:<family>:u|s:<who>").
	rateKeys = "rl:*"
)

// Command sets. Names are lower case, as ACL GETUSER shows them.
var (
	// connect is what go-redis sends on a new connection (HELLO, then AUTH
	// where HELLO is refused; package redisconn turns CLIENT SETINFO off),
	// in cluster mode to find the slots (CLUSTER SLOTS) and where each
	// command's keys are (COMMAND, metadata only), and what a health check
	// sends.
	connect = []string{"hello", "auth", "cluster|slots", "command", "ping"}
	// scripts: a redis.Script runs by EVALSHA, and by EVAL when Redis does
	// not hold it yet (NOSCRIPT, after a restart or failover).
	scripts = []string{"evalsha", "eval"}
	// rate: redis_rate's script runs as read-only-flagged EVAL(SHA)_RO and
	// reads the server's clock (TIME) inside it; GET and SET are its keys'.
	rate = []string{"evalsha_ro", "eval_ro", "time", "get", "set"}
)

// rules are each function's key families and commands, besides connect
// and scripts, which every function has. The commands include those the
// scripts it runs call (Redis checks each redis.call too).
var rules = map[string]struct{ keys, commands []string }{
	// The withdrawal API (create, get, list, change, cancel), the payout
	// provider's callbacks, the payment provider's confirmations (which
	// settle flash-sale orders: item shards, the events queue, the Redis
	// order ledger), /v1/admin/stats (every queue's counts, the registry)
	// and the rate limits. No preheat intents: preheating is the flash-sale
	// function's.
	Enqueue: {
		keys: []string{withdrawalKeys, itemKeys, eventKeys, registryKey, orderIndexKey, rateKeys},
		commands: slices.Concat(rate, []string{
			"exists", "hget", "hgetall", "hmget", "hexists", "hset", "hsetnx", "hdel", "hincrby",
			"zadd", "zrem", "zscore", "zmscore", "zcard", "zcount", "zrange", "zrevrangebylex", "del",
		}),
	},
	// The flash-sale API: preheat (intents, the registry, item shards),
	// item state, admission, a buyer's purchases; the rate limits. No
	// withdrawal key, no order ledger, no queue reads beyond admission's
	// back-pressure count, no MULTI (only compensation uses one).
	Seckill: {
		keys: []string{itemKeys, eventKeys, registryKey, intentKeys, intentIndexKey, rateKeys},
		commands: slices.Concat(rate, []string{
			"exists", "hget", "hgetall", "hmget", "hexists", "hset", "hsetnx", "hdel", "hincrby",
			"zadd", "zrem", "zscore", "zcard", "zcount", "del",
		}),
	},
	// The poller: claims from every queue, acks and re-schedules, returns
	// expired leases; the reconciler (withdrawal keys), the compensation
	// pass (every flash-sale key, the order ledger), the idempotency purge
	// and the queue metrics. No rate limit.
	Poller: {
		keys: []string{withdrawalKeys, itemKeys, eventKeys, registryKey, intentKeys, intentIndexKey, orderIndexKey},
		commands: []string{
			"get", "set", "exists", "hget", "hgetall", "hmget", "hexists", "hscan", "hset", "hsetnx", "hdel", "hincrby",
			"zadd", "zrem", "zscore", "zmscore", "zcard", "zcount", "zrange", "zrangebyscore",
			"zremrangebyrank", "zremrangebyscore", "del", "multi", "exec",
		},
	},
	// The consumer: payouts (the withdrawal's record and job), orders
	// (item shards, the events queue, the order ledger) and, for a job that
	// kept failing, its queue's dead set (found through the registry). It
	// claims nothing and counts nothing: no ZRANGE, ZCARD or ZCOUNT.
	Consumer: {
		keys: []string{withdrawalKeys, itemKeys, eventKeys, registryKey, orderIndexKey},
		commands: []string{
			"get", "set", "exists", "hget", "hgetall", "hmget", "hexists", "hset", "hsetnx", "hdel", "hincrby",
			"zadd", "zrem", "zscore", "zmscore", "del",
		},
	},
	// The operator commands: payouts unresolved|resolve, reconcile (the
	// poller's reconciler and compensation), stats, dead list|requeue|purge
	// and peek over every queue. No rate limit.
	Operator: {
		keys: []string{withdrawalKeys, itemKeys, eventKeys, registryKey, intentKeys, intentIndexKey, orderIndexKey},
		commands: []string{
			"get", "set", "exists", "hget", "hgetall", "hmget", "hexists", "hscan", "hset", "hsetnx", "hdel", "hincrby",
			"zadd", "zrem", "zscore", "zmscore", "zcard", "zcount", "zrange", "zrangebyscore",
			"zremrangebyrank", "zremrangebyscore", "del", "multi", "exec",
		},
	},
}

// Rules are one function's rules: key patterns under the prefix, and the
// commands it may send.
type Rules struct {
	Keys     []string
	Commands []string
}

// For returns fn's rules, with the commands sorted and unique.
func For(fn string) (Rules, error) {
	r, ok := rules[fn]
	if !ok {
		return Rules{}, fmt.Errorf("redisacl: no function %q (want one of %s)", fn, strings.Join(Functions(), ", "))
	}
	cmds := slices.Concat(connect, scripts, r.commands)
	slices.Sort(cmds)
	return Rules{Keys: slices.Clone(r.keys), Commands: slices.Compact(cmds)}, nil
}

// AccessString is fn's access string under key prefix prefix: "on", a
// "~<prefix><pattern>" per key family, "-@all", then "+<command>" each.
// It carries no password: ElastiCache takes those apart, and ACL SETUSER
// is given ">password" beside it.
func AccessString(fn, prefix string) (string, error) {
	r, err := For(fn)
	if err != nil {
		return "", err
	}
	return r.AccessString(prefix)
}

// AccessString renders r under key prefix prefix.
func (r Rules) AccessString(prefix string) (string, error) {
	p, err := escape(prefix)
	if err != nil {
		return "", err
	}
	parts := []string{"on"}
	for _, k := range r.Keys {
		parts = append(parts, "~"+p+k)
	}
	parts = append(parts, "-@all")
	for _, c := range r.Commands {
		parts = append(parts, "+"+c)
	}
	return strings.Join(parts, " "), nil
}

// escape makes prefix a literal in a key pattern: Redis's glob treats
// * ? [ ] and \ specially. An access string is split at spaces, so a prefix
// with white space (or none at all) cannot be written in one.
func escape(prefix string) (string, error) {
	if prefix == "" {
		return "", errors.New("redisacl: empty key prefix")
	}
	if strings.ContainsFunc(prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "", fmt.Errorf("redisacl: key prefix %q has white space or control characters, which no access string can carry", prefix)
	}
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String(), nil
}
