-- finish: record the final result (paid or failed) of a payout attempt.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> open set of the shard: the record stays there until finance is told
-- ARGV[1] -> attempt id the result belongs to
-- ARGV[2] -> final status: paid | failed
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> payout id ("" if none)
-- ARGV[5] -> last error ("" if none)
-- ARGV[6] -> withdrawal id
-- ARGV[7] -> this write's id (a resent script recognises its own write)
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = recorded, 2 = stale (the record is not in that attempt any more).
local cur = redis.call('HMGET', KEYS[1], 'status', 'aid', 'op')
if not cur[1] then
  return {0}
end
if cur[3] == ARGV[7] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
if cur[1] ~= 'processing' or cur[2] ~= ARGV[1] then
  return {2, redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'processed', ARGV[3], 'updated', ARGV[3],
  'payout_id', ARGV[4], 'last_error', ARGV[5], 'op', ARGV[7])
redis.call('HDEL', KEYS[1], 'until', 'maybe')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
return {1, redis.call('HGETALL', KEYS[1])}
