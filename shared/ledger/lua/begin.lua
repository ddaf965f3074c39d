-- begin: start a payout attempt if the withdrawal is due and nobody else is
-- paying it out. If another attempt is running, schedule the job again for
-- the moment that attempt may be taken over, so that a consumer which died
-- mid-attempt is always followed up.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> open set of the shard (member: id, score: when to look at it again)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> deadline of the attempt, unix ms (past it, another may take over)
-- ARGV[3] -> tolerated clock skew between poller and consumer, ms
-- ARGV[4] -> withdrawal id (the job id)
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = attempt started (status processing, attempts + 1), 2 = busy (another
-- attempt runs; the job is due again at its deadline), 3 = not due (a stale
-- duplicate job), 4 = final.
local cur = redis.call('HMGET', KEYS[1], 'status', 'due', 'until', 'attempts')
local status = cur[1]
if not status then
  return {0}
end
local now = tonumber(ARGV[1])
local code = 4
if status == 'scheduled' or status == 'retrying' then
  if tonumber(cur[2]) > now + tonumber(ARGV[3]) then
    code = 3
  else
    code = 1
  end
elseif status == 'processing' then
  if tonumber(cur[3]) > now then
    code = 2
    redis.call('ZADD', KEYS[2], cur[3], ARGV[4])
  else
    code = 1
  end
end
if code == 1 then
  redis.call('HSET', KEYS[1], 'status', 'processing', 'attempts', tonumber(cur[4]) + 1,
    'until', ARGV[2], 'updated', ARGV[1])
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
end
return {code, redis.call('HGETALL', KEYS[1])}
