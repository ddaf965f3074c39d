-- apply: apply a payout provider's callback, once per event id, as a
-- compare-and-set: the caller read the record (its revision ARGV[1]) and
-- decided the step (withdrawal.Step); if the record moved meanwhile the
-- caller reads it again. The revision, not the last write id, is compared:
-- every write counts a revision, while some (cancel, notified) keep the
-- write id. A change to a status finance hears of schedules the job now, so
-- that finance is told. A callback about a withdrawal never sent to the
-- provider (withdrawal.Withdrawal.NeverSent: scheduled, retrying or
-- cancelled with no call counted, stamped or that may have paid) is refused
-- here, in the step that would write it, and nothing is written, not even
-- the event id (the same event after a real send still applies).
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> open set of the shard
-- ARGV[1] -> the record's revision as the caller read it
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
-- was applied before, 4 = the withdrawal was never sent (nothing written).
local cur = redis.call('HMGET', KEYS[1], 'status', 'op', 'ev', 'rev', 'attempts', 'first_sent', 'maybe')
local status = cur[1]
if not status then
  return {0}
end
if cur[2] == ARGV[8] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
local events = cur[3] or ''
if string.find(' ' .. events .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then
  return {3, redis.call('HGETALL', KEYS[1])}
end
if (status == 'scheduled' or status == 'retrying' or status == 'cancelled') and
    tonumber(cur[5] or '0') == 0 and not cur[6] and cur[7] ~= '1' then
  return {4, redis.call('HGETALL', KEYS[1])}
end
if (cur[4] or '0') ~= ARGV[1] then
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
