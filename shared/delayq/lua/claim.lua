-- claim: return expired leases of one shard to the due set, then claim due jobs
-- under a new lease. Work is bounded by ARGV[3] in both steps.
--
-- KEYS[1] -> due set      (member: job id, score: due time, unix ms)
-- KEYS[2] -> inflight set (member: job id, score: lease deadline, unix ms)
-- KEYS[3] -> the shard's last lease token (string)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> lease deadline of the jobs claimed now, unix ms (the lease token)
-- ARGV[3] -> maximum number of jobs to claim, and of expired leases to return
--
-- Returns { {id1, due1, id2, due2, ...}, next due score or "", reaped count,
-- lease token }. A shard's lease tokens only grow: a claim whose deadline is
-- not past the last token handed out (two claims in one millisecond, a
-- claimer whose clock is behind) takes the next millisecond. So a whole lease
-- can be acked by its token, and a late or repeated ack of an old lease never
-- finishes the jobs of a newer one.
-- A reaped job goes back due "now" unless the due set already holds it (a retry
-- was scheduled for it), in which case that schedule wins.
local due = KEYS[1]
local inflight = KEYS[2]
local now = ARGV[1]
local deadline = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  redis.call('ZADD', due, 'NX', now, id)
end
if #expired > 0 then
  redis.call('ZREM', inflight, unpack(expired))
end

-- The jobs due are the set's first n by rank: they leave it by rank, which
-- costs no lookup per job.
local claimed = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
local n = #claimed / 2
if n > 0 then
  local last = tonumber(redis.call('GET', KEYS[3]) or '0')
  if deadline <= last then
    deadline = last + 1
  end
  redis.call('SET', KEYS[3], deadline)
  local leases = {}
  for i = 1, n do
    leases[2 * i - 1] = deadline
    leases[2 * i] = claimed[2 * i - 1]
  end
  redis.call('ZREMRANGEBYRANK', due, 0, n - 1)
  redis.call('ZADD', inflight, unpack(leases))
end

local next = ''
local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if #head > 0 then
  next = head[2]
end
return {claimed, next, #expired, deadline}
