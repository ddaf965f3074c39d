package redisguard

// What ElastiCache Serverless (Valkey, Redis OSS) serves, from
//
//	"Supported and restricted Valkey, Memcached, and Redis OSS commands",
//	https://docs.aws.amazon.com/AmazonElastiCache/latest/dg/SupportedCommands.html
//	read 2026-12-03.
//
// It is kept as an allow-list, not as the page's deny-list ("Restricted
// Valkey and Redis OSS commands"), because the page gives both and the
// deny-list is not complete: CLIENT SETINFO, WATCH and UNWATCH are on
// neither list, so a deny-list would let through what the service was never
// said to serve. With an allow-list a command nobody checked is refused here,
// in a test, not in production. Where the two lists disagree (COMMANDLOG is
// on both) the restriction wins.
//
// The JSON commands are served too (the page links their list); the Bloom
// filter commands are left out: nothing here sends them, so they are refused
// until someone reads their page.
//
// A container command (CLUSTER, CLIENT, ACL ...) is served only with the
// subcommands listed; the container alone, or its HELP, is not.

// served are the commands served without a subcommand check.
var served = set(
	// Bitmap
	"BITCOUNT", "BITFIELD", "BITFIELD_RO", "BITOP", "BITPOS", "GETBIT", "SETBIT",
	// Cluster management (besides CLUSTER subcommands below)
	"READONLY", "READWRITE",
	// Connection management (besides CLIENT subcommands below)
	"AUTH", "ECHO", "HELLO", "PING", "QUIT", "RESET", "SELECT",
	// Generic
	"COPY", "DEL", "DUMP", "EXISTS", "EXPIRE", "EXPIREAT", "EXPIRETIME", "PERSIST",
	"PEXPIRE", "PEXPIREAT", "PEXPIRETIME", "PTTL", "RANDOMKEY", "RENAME", "RENAMENX",
	"RESTORE", "SCAN", "SORT", "SORT_RO", "TOUCH", "TTL", "TYPE", "UNLINK",
	// Geospatial
	"GEOADD", "GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS", "GEORADIUS_RO",
	"GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO", "GEOSEARCH", "GEOSEARCHSTORE",
	// Hash
	"HDEL", "HEXISTS", "HGET", "HGETALL", "HINCRBY", "HINCRBYFLOAT", "HKEYS", "HLEN",
	"HMGET", "HMSET", "HRANDFIELD", "HSCAN", "HSET", "HSETNX", "HSTRLEN", "HVALS",
	// HyperLogLog
	"PFADD", "PFCOUNT", "PFMERGE",
	// List
	"BLMOVE", "BLMPOP", "BLPOP", "BRPOP", "BRPOPLPUSH", "LINDEX", "LINSERT", "LLEN",
	"LMOVE", "LMPOP", "LPOP", "LPOS", "LPUSH", "LPUSHX", "LRANGE", "LREM", "LSET",
	"LTRIM", "RPOP", "RPOPLPUSH", "RPUSH", "RPUSHX",
	// Pub/Sub (besides PUBSUB subcommands below)
	"PUBLISH", "SPUBLISH", "SSUBSCRIBE", "SUBSCRIBE", "SUNSUBSCRIBE", "UNSUBSCRIBE",
	// Scripting (besides SCRIPT subcommands below); FCALL and FUNCTION are
	// restricted.
	"EVAL", "EVAL_RO", "EVALSHA", "EVALSHA_RO",
	// Server management (besides ACL and COMMAND subcommands below)
	"DBSIZE", "COMMAND", "FLUSHALL", "FLUSHDB", "INFO", "LOLWUT", "ROLE", "TIME",
	// Set
	"SADD", "SCARD", "SDIFF", "SDIFFSTORE", "SINTER", "SINTERCARD", "SINTERSTORE",
	"SISMEMBER", "SMEMBERS", "SMISMEMBER", "SMOVE", "SPOP", "SRANDMEMBER", "SREM",
	"SSCAN", "SUNION", "SUNIONSTORE",
	// Sorted set
	"BZMPOP", "BZPOPMAX", "BZPOPMIN", "ZADD", "ZCARD", "ZCOUNT", "ZDIFF", "ZDIFFSTORE",
	"ZINCRBY", "ZINTER", "ZINTERCARD", "ZINTERSTORE", "ZLEXCOUNT", "ZMPOP", "ZMSCORE",
	"ZPOPMAX", "ZPOPMIN", "ZRANDMEMBER", "ZRANGE", "ZRANGEBYLEX", "ZRANGEBYSCORE",
	"ZRANGESTORE", "ZRANK", "ZREM", "ZREMRANGEBYLEX", "ZREMRANGEBYRANK",
	"ZREMRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYLEX", "ZREVRANGEBYSCORE", "ZREVRANK",
	"ZSCAN", "ZSCORE", "ZUNION", "ZUNIONSTORE",
	// Stream (besides XGROUP and XINFO subcommands below)
	"XACK", "XADD", "XAUTOCLAIM", "XCLAIM", "XDEL", "XLEN", "XPENDING", "XRANGE",
	"XREAD", "XREADGROUP", "XREVRANGE", "XTRIM",
	// String
	"APPEND", "DECR", "DECRBY", "GET", "GETDEL", "GETEX", "GETRANGE", "GETSET", "INCR",
	"INCRBY", "INCRBYFLOAT", "LCS", "MGET", "MSET", "MSETNX", "PSETEX", "SET", "SETEX",
	"SETNX", "SETRANGE", "STRLEN", "SUBSTR",
	// Transactions: no WATCH or UNWATCH.
	"DISCARD", "EXEC", "MULTI",
	// JSON (json-list-commands.html)
	"JSON.ARRAPPEND", "JSON.ARRINDEX", "JSON.ARRINSERT", "JSON.ARRLEN", "JSON.ARRPOP",
	"JSON.ARRTRIM", "JSON.CLEAR", "JSON.DEBUG", "JSON.DEL", "JSON.FORGET", "JSON.GET",
	"JSON.MGET", "JSON.MSET", "JSON.NUMINCRBY", "JSON.NUMMULTBY", "JSON.OBJLEN",
	"JSON.OBJKEYS", "JSON.RESP", "JSON.SET", "JSON.STRAPPEND", "JSON.STRLEN",
	"JSON.TOGGLE", "JSON.TYPE",
)

// servedSub are the container commands and the subcommands of each that are
// served. COMMAND is served bare too (in served above).
var servedSub = map[string]map[string]bool{
	"ACL":    set("CAT", "GENPASS", "GETUSER", "LIST", "USERS", "WHOAMI"),
	"CLIENT": set("GETNAME", "REPLY", "SETNAME"),
	"CLUSTER": set("COUNTKEYSINSLOT", "GETKEYSINSLOT", "INFO", "KEYSLOT", "MYID", "NODES",
		"REPLICAS", "SHARDS", "SLOTS", "SLOT-STATS"),
	"COMMAND": set("COUNT", "DOCS", "GETKEYS", "GETKEYSANDFLAGS", "INFO", "LIST"),
	"PUBSUB":  set("CHANNELS", "NUMSUB", "SHARDCHANNELS", "SHARDNUMSUB"),
	"SCRIPT":  set("EXISTS", "FLUSH", "LOAD", "SHOW"),
	"XGROUP":  set("CREATE", "CREATECONSUMER", "DELCONSUMER", "DESTROY", "SETID"),
	"XINFO":   set("CONSUMERS", "GROUPS", "STREAM"),
}

// containers take a subcommand, which a refusal names with them.
var containers = set("ACL", "CLIENT", "CLUSTER", "COMMAND", "COMMANDLOG", "CONFIG", "DEBUG",
	"FUNCTION", "LATENCY", "MEMORY", "MODULE", "OBJECT", "PUBSUB", "SCRIPT", "SLOWLOG",
	"XGROUP", "XINFO")

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// Served reports whether ElastiCache Serverless serves the command named by
// name and, for a container command, sub (both case-insensitive; sub is
// ignored for other commands).
func Served(name, sub string) bool {
	name, sub = upper(name), upper(sub)
	if subs, ok := servedSub[name]; ok {
		if sub == "" {
			return served[name] // COMMAND alone
		}
		return subs[sub]
	}
	return served[name]
}
