-- kill: give up on a claimed job: move it from its lease to the dead set, where
-- operators can see, requeue or purge it.
--
-- KEYS[1] -> inflight set (member: job id, score: lease deadline, unix ms)
-- KEYS[2] -> dead set     (member: job id, score: time of death, unix ms)
-- ARGV[1] -> job id
-- ARGV[2] -> lease token, or "0" to kill whether or not the job is leased
-- ARGV[3] -> now, unix ms
--
-- Returns 1 when the job was moved, 0 when the lease token no longer holds it.
local inflight = KEYS[1]
local dead = KEYS[2]
local id = ARGV[1]
local token = tonumber(ARGV[2])

if token ~= 0 then
  local score = redis.call('ZSCORE', inflight, id)
  if not score or tonumber(score) ~= token then
    return 0
  end
end
redis.call('ZREM', inflight, id)
redis.call('ZADD', dead, ARGV[3], id)
return 1
