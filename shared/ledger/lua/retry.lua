-- retry: record a payout attempt that ended without a verdict and schedule
-- the next one, in one step, clearing the job's lease if it still has one.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> delay-queue inflight set of the shard
-- KEYS[4] -> open set of the shard
-- ARGV[1] -> attempt id that ended
-- ARGV[2] -> time of the next attempt, unix ms
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> the error
-- ARGV[5] -> withdrawal id (the job id)
-- ARGV[6] -> "1" when the call may have paid (kept for good), else "0"
-- ARGV[7] -> this write's id (a resent script recognises its own write)
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = scheduled, 2 = stale (the record is not in that attempt any more).
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
redis.call('HSET', KEYS[1], 'status', 'retrying', 'due', ARGV[2], 'updated', ARGV[3],
  'last_error', ARGV[4], 'op', ARGV[7])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'maybe', '1')
end
redis.call('HDEL', KEYS[1], 'until')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[5])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[5])
return {1, redis.call('HGETALL', KEYS[1])}
