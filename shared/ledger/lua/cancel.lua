-- cancel: cancel a scheduled or retrying withdrawal that no call may have
-- paid, and take it off the queue.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> delay-queue inflight set of the shard
-- KEYS[4] -> open set of the shard
-- ARGV[1] -> user id (the owner)
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> withdrawal id
--
-- Returns {0} when there is no such withdrawal of that user, else
-- {code, record as HGETALL}: 1 = cancelled now, 2 = was cancelled already
-- (also what a resent script answers), 3 = not cancellable (processing, a
-- call may have paid it, or it ended otherwise).
local cur = redis.call('HMGET', KEYS[1], 'status', 'u', 'maybe', 'user')
if not cur[1] or (cur[2] or cur[4]) ~= ARGV[1] then -- 'user' in the first layout
  return {0}
end
local code = 3
if (cur[1] == 'scheduled' or cur[1] == 'retrying') and cur[3] ~= '1' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'updated', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
  redis.call('ZREM', KEYS[2], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
  code = 1
elseif cur[1] == 'cancelled' then
  code = 2
end
return {code, redis.call('HGETALL', KEYS[1])}
