-- apply: apply a payout provider's callback, once per event id, as a
-- compare-and-set: the caller read the record (its last write id ARGV[1])
-- and decided the step (withdrawal.Step); if the record moved meanwhile the
-- caller reads it again. A change to a status finance hears of schedules
-- the job now, so that finance is told.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> open set of the shard
-- ARGV[1] -> the record's last write id as the caller read it ("" for none)
-- ARGV[2] -> event id
-- ARGV[3] -> status to move to ("" to move nothing: only the event is kept)
-- ARGV[4] -> payout id ("" if none)
-- ARGV[5] -> reason ("" if none)
-- ARGV[6] -> now, unix ms
-- ARGV[7] -> withdrawal id
-- ARGV[8] -> this write's id (a resent script recognises its own write)
-- ARGV[9] -> most event ids kept
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = applied, 2 = the record moved since the caller read it, 3 = the event
-- was applied before.
local cur = redis.call('HMGET', KEYS[1], 'status', 'op', 'ev')
if not cur[1] then
  return {0}
end
if cur[2] == ARGV[8] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
local events = cur[3] or ''
if string.find(' ' .. events .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then
  return {3, redis.call('HGETALL', KEYS[1])}
end
if (cur[2] or '') ~= ARGV[1] then
  return {2, redis.call('HGETALL', KEYS[1])}
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'status', ARGV[3], 'processed', ARGV[6], 'updated', ARGV[6])
  if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'payout_id', ARGV[4])
  end
  if ARGV[3] == 'failed' then
    redis.call('HSET', KEYS[1], 'last_error', ARGV[5])
  end
  redis.call('HDEL', KEYS[1], 'until', 'maybe')
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[7])
  redis.call('ZADD', KEYS[3], ARGV[6], ARGV[7])
end
local kept = {}
for e in string.gmatch(events, '%S+') do
  kept[#kept + 1] = e
end
kept[#kept + 1] = ARGV[2]
while #kept > tonumber(ARGV[9]) do
  table.remove(kept, 1)
end
redis.call('HSET', KEYS[1], 'ev', table.concat(kept, ' '), 'op', ARGV[8])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return {1, redis.call('HGETALL', KEYS[1])}
