package redisguard

import "strconv"

// keysOf returns the keys of the command args (name n first) that must share
// a hash slot: a script's declared KEYS, and the keys of a multi-key
// command. For a one-key command it returns that key, so a transaction's
// commands can be judged together; for a command it does not know it
// returns none (a real cluster in the tests catches what this misses).
func keysOf(n string, args []any) []string {
	at := func(from, to int) []string {
		to = min(to, len(args))
		if from >= to {
			return nil
		}
		out := make([]string, 0, to-from)
		for _, a := range args[from:to] {
			out = append(out, str(a))
		}
		return out
	}
	numkeys := func(pos int) []string { // numkeys at pos, the keys after it
		if pos >= len(args) {
			return nil
		}
		k, err := strconv.Atoi(str(args[pos]))
		if err != nil || k < 0 {
			return nil
		}
		return at(pos+1, pos+1+k)
	}
	switch n {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO":
		return numkeys(2)
	case "DEL", "EXISTS", "UNLINK", "TOUCH", "MGET", "WATCH", "SDIFF", "SINTER", "SUNION",
		"SDIFFSTORE", "SINTERSTORE", "SUNIONSTORE", "PFCOUNT", "PFMERGE":
		return at(1, len(args))
	case "RENAME", "RENAMENX", "COPY", "RPOPLPUSH", "BRPOPLPUSH", "LMOVE", "BLMOVE", "SMOVE",
		"GEOSEARCHSTORE", "ZRANGESTORE":
		return at(1, 3)
	case "BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX": // the last is the timeout
		return at(1, len(args)-1)
	case "MSET", "MSETNX":
		var out []string
		for i := 1; i < len(args); i += 2 {
			out = append(out, str(args[i]))
		}
		return out
	case "BITOP":
		return at(2, len(args))
	case "ZUNION", "ZINTER", "ZDIFF", "ZINTERCARD", "SINTERCARD", "LMPOP", "ZMPOP":
		return numkeys(1)
	case "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE":
		return append(at(1, 2), numkeys(2)...)
	case "BLMPOP", "BZMPOP":
		return numkeys(2)
	}
	if oneKey[n] {
		return at(1, 2)
	}
	return nil
}

// oneKey are the served commands whose only key is their first argument.
var oneKey = set(
	"BITCOUNT", "BITFIELD", "BITFIELD_RO", "BITPOS", "GETBIT", "SETBIT",
	"DUMP", "EXPIRE", "EXPIREAT", "EXPIRETIME", "PERSIST", "PEXPIRE", "PEXPIREAT",
	"PEXPIRETIME", "PTTL", "RESTORE", "SORT_RO", "TTL", "TYPE",
	"GEOADD", "GEODIST", "GEOHASH", "GEOPOS", "GEORADIUS_RO", "GEORADIUSBYMEMBER_RO", "GEOSEARCH",
	"HDEL", "HEXISTS", "HGET", "HGETALL", "HINCRBY", "HINCRBYFLOAT", "HKEYS", "HLEN",
	"HMGET", "HMSET", "HRANDFIELD", "HSCAN", "HSET", "HSETNX", "HSTRLEN", "HVALS",
	"PFADD",
	"LINDEX", "LINSERT", "LLEN", "LPOP", "LPOS", "LPUSH", "LPUSHX", "LRANGE", "LREM", "LSET",
	"LTRIM", "RPOP", "RPUSH", "RPUSHX",
	"SADD", "SCARD", "SISMEMBER", "SMEMBERS", "SMISMEMBER", "SPOP", "SRANDMEMBER", "SREM", "SSCAN",
	"ZADD", "ZCARD", "ZCOUNT", "ZINCRBY", "ZLEXCOUNT", "ZMSCORE", "ZPOPMAX", "ZPOPMIN",
	"ZRANDMEMBER", "ZRANGE", "ZRANGEBYLEX", "ZRANGEBYSCORE", "ZRANK", "ZREM", "ZREMRANGEBYLEX",
	"ZREMRANGEBYRANK", "ZREMRANGEBYSCORE", "ZREVRANGE", "ZREVRANGEBYLEX", "ZREVRANGEBYSCORE",
	"ZREVRANK", "ZSCAN", "ZSCORE",
	"XACK", "XADD", "XAUTOCLAIM", "XCLAIM", "XDEL", "XLEN", "XPENDING", "XRANGE", "XREVRANGE", "XTRIM",
	"APPEND", "DECR", "DECRBY", "GET", "GETDEL", "GETEX", "GETRANGE", "GETSET", "INCR",
	"INCRBY", "INCRBYFLOAT", "PSETEX", "SET", "SETEX", "SETNX", "SETRANGE", "STRLEN", "SUBSTR",
)
