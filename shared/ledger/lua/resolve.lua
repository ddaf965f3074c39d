-- resolve: settle a withdrawal by an operator's word (paid with the
-- provider's payout id, or failed with a reason), recording who and when,
-- and schedule its job now so that finance is told. Only a withdrawal that
-- nothing else can settle is an operator's (withdrawal.Unresolvable decides
-- the same): not final, no attempt running, and a call may have paid it;
-- or, as failed only, one no call may have paid that retries past the
-- maximum attempts. Anything else is refused and nothing is written.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> open set of the shard
-- ARGV[1] -> paid | failed
-- ARGV[2] -> payout id ("" if none)
-- ARGV[3] -> reason ("" if none)
-- ARGV[4] -> operator
-- ARGV[5] -> now, unix ms
-- ARGV[6] -> withdrawal id
-- ARGV[7] -> this write's id (a resent script recognises its own write)
-- ARGV[8] -> maximum attempts: past them a withdrawal no call may have paid
--            may be resolved as failed ("0": never)
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = resolved (or it was resolved so already), 3 = it ended otherwise,
-- 4 = an attempt is running (its result would be overwritten), 5 = not an
-- operator's to settle (never sent, or the payout step settles it).
local cur = redis.call('HMGET', KEYS[1], 'status', 'until', 'op', 'attempts', 'first_sent', 'maybe')
local status = cur[1]
if not status then
  return {0}
end
if cur[3] == ARGV[7] or status == ARGV[1] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
if status == 'paid' or status == 'failed' or status == 'cancelled' or status == 'returned' then
  return {3, redis.call('HGETALL', KEYS[1])}
end
if status == 'processing' and tonumber(cur[2]) > tonumber(ARGV[5]) then
  return {4, redis.call('HGETALL', KEYS[1])}
end
local attempts = tonumber(cur[4] or '0')
local maybe = cur[6] == '1'
if not maybe then
  local max = tonumber(ARGV[8])
  if status == 'processing' or ARGV[1] ~= 'failed' or max == 0 or attempts < max then
    return {5, redis.call('HGETALL', KEYS[1])}
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[1], 'processed', ARGV[5], 'updated', ARGV[5],
  'resolved_by', ARGV[4], 'resolved_at', ARGV[5], 'op', ARGV[7])
if ARGV[1] == 'paid' then
  redis.call('HSET', KEYS[1], 'payout_id', ARGV[2])
else
  redis.call('HSET', KEYS[1], 'last_error', ARGV[3])
end
redis.call('HDEL', KEYS[1], 'until', 'maybe')
redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[6])
return {1, redis.call('HGETALL', KEYS[1])}
