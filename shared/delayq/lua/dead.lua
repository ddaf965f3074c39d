-- dead: take dead jobs of one shard out of the dead set, either giving them
-- another chance (requeue: back to the due set, due now, so the poller hands
-- them on again) or forgetting them for good (purge). Work is bounded: the
-- named ids (the caller sends at most a batch), or up to ARGV[3] of the
-- oldest dead jobs.
--
-- KEYS[1] -> due set      (member: job id, score: due time, unix ms)
-- KEYS[2] -> inflight set (member: job id, score: lease deadline, unix ms)
-- KEYS[3] -> dead set     (member: job id, score: time of death, unix ms)
-- ARGV[1] -> "requeue" or "purge"
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> most jobs to take when no ids are named
-- ARGV[4..] -> ids to take; an id the dead set does not hold is skipped.
--             None: the oldest dead jobs.
--
-- Returns { {ids taken}, dead jobs left in the shard }.
-- A requeued job that is scheduled meanwhile keeps the earlier of its
-- schedule and now; one held under a lease (it was scheduled again and
-- claimed) only leaves the dead set, so that requeueing never makes a second
-- copy of a job.
local due = KEYS[1]
local inflight = KEYS[2]
local dead = KEYS[3]
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local ids = {}
if #ARGV > 3 then
  for i = 4, #ARGV do
    if redis.call('ZSCORE', dead, ARGV[i]) then
      ids[#ids + 1] = ARGV[i]
    end
  end
else
  ids = redis.call('ZRANGE', dead, 0, limit - 1)
end

if ARGV[1] == 'requeue' then
  for _, id in ipairs(ids) do
    if not redis.call('ZSCORE', inflight, id) then
      local at = redis.call('ZSCORE', due, id)
      if not at or tonumber(at) > now then
        redis.call('ZADD', due, now, id)
      end
    end
  end
end
if #ids > 0 then
  redis.call('ZREM', dead, unpack(ids))
end
return {ids, redis.call('ZCARD', dead)}
