-- send: an attempt that settled first (the record may have been paid) is
-- about to send the payout request: count the call, stamp the first send,
-- and, when the provider's lookup said it never received the request, forget
-- that an earlier call may have paid. The attempt's deadline becomes the
-- record's sent_until (never lowered; see begin.lua).
--
-- KEYS[1] -> withdrawal record
-- ARGV[1] -> attempt id
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> "1" when the provider never received the request, else "0"
-- ARGV[4] -> this write's id (a resent script recognises its own write)
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = recorded, 2 = stale (the record is not in that attempt any more).
local cur = redis.call('HMGET', KEYS[1], 'status', 'aid', 'op', 'until', 'sent_until')
if not cur[1] then
  return {0}
end
if cur[3] == ARGV[4] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
if cur[1] ~= 'processing' or cur[2] ~= ARGV[1] then
  return {2, redis.call('HGETALL', KEYS[1])}
end
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSETNX', KEYS[1], 'first_sent', ARGV[2])
if cur[4] and tonumber(cur[5] or '0') < tonumber(cur[4]) then
  redis.call('HSET', KEYS[1], 'sent_until', cur[4])
end
if ARGV[3] == '1' then
  redis.call('HDEL', KEYS[1], 'maybe')
end
redis.call('HSET', KEYS[1], 'updated', ARGV[2], 'op', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'rev', 1)
return {1, redis.call('HGETALL', KEYS[1])}
