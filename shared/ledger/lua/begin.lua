-- begin: start a payout attempt if the withdrawal is due and nobody else is
-- paying it out. If another attempt is running, schedule the job again for
-- the moment that attempt may be taken over (never earlier than a schedule
-- the job has), so that a consumer which died mid-attempt is always followed
-- up. A job that came early (a stale duplicate) is put back at the record's
-- due time, so the record never waits for the reconciler.
--
-- An attempt on a record with no call that may have paid counts the call it
-- is about to make; one that takes over an attempt past its deadline marks
-- the record as possibly paid (the dead consumer may have sent its request),
-- and such an attempt settles first (the lookup) and counts a call only when
-- it sends one (send.lua). A call counted stamps the attempt's deadline as
-- the record's sent_until (never lowering it): no request of the attempt
-- is signed or running past it, which is what a lookup's "never received"
-- is judged against.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> delay-queue due set of the shard
-- KEYS[3] -> open set of the shard (member: id, score: when to look at it again)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> deadline of the attempt, unix ms (past it, another may take over)
-- ARGV[3] -> tolerated clock skew between poller and consumer, ms
-- ARGV[4] -> withdrawal id (the job id)
-- ARGV[5] -> attempt id (unique; fences the attempt's later writes)
-- ARGV[6] -> due time the delivery was claimed for, unix ms ("0": unknown).
--            A record due at exactly that time starts within the skew; one
--            due at another time (rescheduled after the claim) only once
--            its own due time has passed, so an old time never pays early.
--
-- Returns {0} when there is no such record, else {code, record as HGETALL}:
-- 1 = attempt started (status processing under ARGV[5]), 2 = busy (another
-- attempt runs; the job is due again at its deadline), 3 = not due (the job
-- is back at the record's due time), 4 = final. Run twice with the same
-- ARGV (a reply lost and the script sent again), it answers 1 again and
-- changes nothing more.
local cur = redis.call('HMGET', KEYS[1], 'status', 'due', 'until', 'aid', 'maybe', 'sent_until')
local status = cur[1]
if not status then
  return {0}
end
if status == 'processing' and cur[4] == ARGV[5] then
  return {1, redis.call('HGETALL', KEYS[1])}
end
local now = tonumber(ARGV[1])
local code = 4
local takeover = false
if status == 'scheduled' or status == 'retrying' then
  local due = tonumber(cur[2])
  local claimed = tonumber(ARGV[6] or '0')
  local latest = now + tonumber(ARGV[3])
  if claimed ~= 0 and claimed ~= due then
    latest = now
  end
  if due > latest then
    code = 3
    redis.call('ZADD', KEYS[2], cur[2], ARGV[4])
  else
    code = 1
  end
elseif status == 'processing' then
  if tonumber(cur[3]) > now then
    code = 2
    redis.call('ZADD', KEYS[2], 'GT', cur[3], ARGV[4])
  else
    code = 1
    takeover = true
  end
end
if code == 1 then
  redis.call('HSET', KEYS[1], 'status', 'processing', 'until', ARGV[2], 'updated', ARGV[1],
    'aid', ARGV[5], 'op', ARGV[5])
  if takeover then
    redis.call('HSET', KEYS[1], 'maybe', '1')
  elseif cur[5] ~= '1' then
    redis.call('HINCRBY', KEYS[1], 'attempts', 1)
    redis.call('HSETNX', KEYS[1], 'first_sent', ARGV[1])
    if tonumber(cur[6] or '0') < tonumber(ARGV[2]) then
      redis.call('HSET', KEYS[1], 'sent_until', ARGV[2])
    end
  end
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
return {code, redis.call('HGETALL', KEYS[1])}
