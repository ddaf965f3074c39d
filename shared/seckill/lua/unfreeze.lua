-- unfreeze: roll a preheat back on one shard: the shard is as it was before
-- the preheat froze it, exactly (its stock left back in "left:<version>").
-- A recoverer (ARGV[2] = "1") also fences the shard: the preheat it rolls
-- back may be stalled rather than dead, and must never freeze it again. The
-- owner rolling back its own refused preheat leaves no trace.
--
-- KEYS[1] -> item shard meta
-- ARGV[1] -> version of the preheat
-- ARGV[2] -> "1" to fence the shard against the version, else "0"
--
-- Returns 1. Run again, it changes nothing more.
local m = redis.call('HMGET', KEYS[1], 'frozen', 'version', 'retired', 'left_aside', 'fence')
if m[1] == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'frozen')
  if m[2] and not m[3] and m[4] then
    redis.call('HDEL', KEYS[1], 'left_aside')
    redis.call('HSET', KEYS[1], 'left:' .. m[2], m[4])
  end
end
if ARGV[2] == '1' and (not m[5] or tonumber(m[5]) < tonumber(ARGV[1])) then
  redis.call('HSET', KEYS[1], 'fence', ARGV[1])
end
return 1
