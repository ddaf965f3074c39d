-- claim: return expired leases of one shard to the due set, then claim due jobs
-- under a new lease. Work is bounded by ARGV[3] in both steps.
--
-- KEYS[1] -> due set      (member: job id, score: due time, unix ms)
-- KEYS[2] -> inflight set (member: job id, score: lease deadline, unix ms)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> lease deadline of the jobs claimed now, unix ms (the lease token)
-- ARGV[3] -> maximum number of jobs to claim, and of expired leases to return
--
-- Returns { {id1, due1, id2, due2, ...}, next due score or "", reaped count }.
-- A reaped job goes back due "now" unless the due set already holds it (a retry
-- was scheduled for it), in which case that schedule wins.
local due = KEYS[1]
local inflight = KEYS[2]
local now = ARGV[1]
local deadline = ARGV[2]
local limit = tonumber(ARGV[3])

local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZADD', due, 'NX', now, id)
end
if #expired > 0 then
  redis.call('ZREM', inflight, unpack(expired))
end

local claimed = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local n = #claimed / 2
if n > 0 then
  local ids = {}
  local leases = {}
  for i = 1, n do
    local id = claimed[2 * i - 1]
    ids[i] = id
    leases[2 * i - 1] = deadline
    leases[2 * i] = id
  end
  redis.call('ZREM', due, unpack(ids))
  redis.call('ZADD', inflight, unpack(leases))
end

local next = ''
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if #head > 0 then
  next = head[2]
end
return {claimed, next, #expired}
