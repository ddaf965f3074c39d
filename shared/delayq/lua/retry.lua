-- retry: schedule a job again at a given time, taking it out of its lease.
--
-- KEYS[1] -> due set      (member: job id, score: due time, unix ms)
-- KEYS[2] -> inflight set (member: job id, score: lease deadline, unix ms)
-- ARGV[1] -> job id
-- ARGV[2] -> new due time, unix ms
-- ARGV[3] -> lease token, or "0" to schedule whether or not the job is leased
--
-- Returns 1 when scheduled, 0 when the lease token no longer holds the job.
local due = KEYS[1]
local inflight = KEYS[2]
local id = ARGV[1]
local at = ARGV[2]
local token = tonumber(ARGV[3])

if token ~= 0 then
  local score = redis.call('ZSCORE', inflight, id)
  if not score or tonumber(score) ~= token then
    return 0
  end
end
redis.call('ZREM', inflight, id)
redis.call('ZADD', due, at, id)
return 1
