-- commit: the one write of every withdrawal transition after its create
-- (withdrawal.Decide decides it, withdrawal.Records runs it): write the
-- record as the caller decided it, with its queue operations, if the record
-- is still at the revision the caller read. A commit sent again after its
-- answer was lost finds its own write id and answers as the first did.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> delay-queue inflight set of the shard
-- KEYS[4] -> open set of the shard
-- ARGV[1] -> the record's revision as the caller read it
-- ARGV[2] -> this write's id
-- ARGV[3] -> withdrawal id (the job's member)
-- ARGV[4] -> n, the number of field/value pairs of the record (0: the
--            record is left as it is, the queue operations alone apply)
-- ARGV[5 .. 4+2n] -> the whole record as field/value pairs
-- then pairs of queue operation and its time (unix ms, "" for none):
--   schedule, schedule_no_earlier, drop_lease, unschedule, watch, unwatch
--
-- Returns {0} when there is no such record, {1} when committed (or
-- committed before, by this very write), {2, record as HGETALL} when the
-- record is not at that revision any more (nothing written).
local cur = redis.call('HMGET', KEYS[1], 'status', 'rev', 'op')
if not cur[1] then
  return {0}
end
if cur[3] == ARGV[2] then
  return {1}
end
if (cur[2] or '0') ~= ARGV[1] then
  return {2, redis.call('HGETALL', KEYS[1])}
end
local n = tonumber(ARGV[4])
local i = 5
if n > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], unpack(ARGV, 5, 4 + 2 * n))
  i = 5 + 2 * n
end
local id = ARGV[3]
while i < #ARGV do
  local kind, at = ARGV[i], ARGV[i + 1]
  if kind == 'schedule' then
    redis.call('ZADD', KEYS[2], at, id)
  elseif kind == 'schedule_no_earlier' then
    redis.call('ZADD', KEYS[2], 'GT', at, id)
  elseif kind == 'drop_lease' then
    redis.call('ZREM', KEYS[3], id)
  elseif kind == 'unschedule' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
  elseif kind == 'watch' then
    redis.call('ZADD', KEYS[4], at, id)
  elseif kind == 'unwatch' then
    redis.call('ZREM', KEYS[4], id)
  else
    return redis.error_reply('commit: unknown queue operation ' .. kind)
  end
  i = i + 2
end
return {1}
