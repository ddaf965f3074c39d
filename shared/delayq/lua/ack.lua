-- ack: finish claimed jobs of one shard, but only under the lease that claimed
-- them; a job whose lease expired and was claimed again is left alone.
--
-- KEYS[1] -> inflight set (member: job id, score: lease deadline, unix ms)
-- ARGV[1] -> lease token (the lease deadline the jobs were claimed with)
-- ARGV[2..] -> job ids
--
-- Returns the number of jobs acked. Two commands whatever the batch size:
-- one ZMSCORE for every lease, one ZREM for those still ours.
local inflight = KEYS[1]
local token = tonumber(ARGV[1])

local ids = {}
for i = 2, #ARGV do
  ids[i - 1] = ARGV[i]
end
local scores = redis.call('ZMSCORE', inflight, unpack(ids))
local mine = {}
for i, score in ipairs(scores) do
  if score and tonumber(score) == token then
    mine[#mine + 1] = ids[i]
  end
end
if #mine > 0 then
  redis.call('ZREM', inflight, unpack(mine))
end
return #mine
