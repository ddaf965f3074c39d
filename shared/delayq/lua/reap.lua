-- reap: return jobs whose lease expired (their poller or consumer died) to the
-- due set, at most ARGV[2] of them. A job the due set already holds keeps its
-- schedule there.
--
-- KEYS[1] -> due set      (member: job id, score: due time, unix ms)
-- KEYS[2] -> inflight set (member: job id, score: lease deadline, unix ms)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> maximum number of jobs to return
--
-- Returns the number of jobs returned.
local due = KEYS[1]
local inflight = KEYS[2]
local now = ARGV[1]

local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  redis.call('ZADD', due, 'NX', now, id)
end
if #expired > 0 then
  redis.call('ZREM', inflight, unpack(expired))
end
return #expired
