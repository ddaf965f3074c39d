-- purge: forget dead jobs of one shard for good. Work is bounded: the named
-- ids (the caller sends at most a batch), or up to ARGV[1] of the oldest.
--
-- KEYS[1] -> dead set (member: job id, score: time of death, unix ms)
-- ARGV[1] -> most jobs to purge when no ids are named
-- ARGV[2..] -> ids to purge; an id the dead set does not hold is skipped.
--             None: the oldest dead jobs.
--
-- Returns { {ids purged}, dead jobs left in the shard }.
local dead = KEYS[1]
local limit = tonumber(ARGV[1])

local ids = {}
if #ARGV > 1 then
  for i = 2, #ARGV do
    if redis.call('ZSCORE', dead, ARGV[i]) then
      ids[#ids + 1] = ARGV[i]
    end
  end
else
  ids = redis.call('ZRANGE', dead, 0, limit - 1)
end
if #ids > 0 then
  redis.call('ZREM', dead, unpack(ids))
end
return {ids, redis.call('ZCARD', dead)}
