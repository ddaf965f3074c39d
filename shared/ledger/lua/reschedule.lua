-- reschedule: move the due time of a scheduled withdrawal, or of a retrying
-- one no call may have paid, in one step with its schedule: the record's due
-- time, the due set at the new time, and out of the inflight set (a claim
-- of the old time not yet handed over is dropped; one already on its way is
-- fenced by begin.lua, which starts a record only at its own due time). So
-- the new time holds and the old one never pays, or nothing changes.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> delay-queue inflight set of the shard
-- KEYS[4] -> open set of the shard
-- ARGV[1] -> user id (the owner)
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> withdrawal id (the job id)
-- ARGV[4] -> new due time, unix ms
-- ARGV[5] -> the revision the record must be at ("" for any: no If-Match)
-- ARGV[6] -> who asks ("user", or the operator)
-- ARGV[7] -> reason ("" if none)
-- ARGV[8] -> this write's id (a resent script recognises its own write)
--
-- Returns {0} when there is no such withdrawal of that user, else
-- {code, record as HGETALL}: 1 = rescheduled (also what a resent script
-- answers), 3 = not reschedulable (processing, a call may have paid it, or
-- it ended), 4 = not at the revision asked (nothing changed).
local cur = redis.call('HMGET', KEYS[1], 'status', 'u', 'maybe', 'rev', 'op', 'due', 'user')
if not cur[1] or (cur[2] or cur[7]) ~= ARGV[1] then -- 'user' in the first layout
  return {0}
end
if cur[5] == ARGV[8] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
if ARGV[5] ~= '' and (cur[4] or '0') ~= ARGV[5] then
  return {4, redis.call('HGETALL', KEYS[1])}
end
if (cur[1] ~= 'scheduled' and cur[1] ~= 'retrying') or cur[3] == '1' then
  return {3, redis.call('HGETALL', KEYS[1])}
end
redis.call('HSET', KEYS[1], 'due', ARGV[4], 'updated', ARGV[2], 'op', ARGV[8],
  'resched_by', ARGV[6], 'resched_reason', ARGV[7], 'resched_at', ARGV[2], 'resched_from', cur[6])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[3])
return {1, redis.call('HGETALL', KEYS[1])}
