-- ack: finish claimed jobs of one shard, but only under the lease that claimed
-- them; a job whose lease expired and was claimed again is left alone.
--
-- KEYS[1] -> inflight set (member: job id, score: lease deadline, unix ms)
-- ARGV[1] -> lease token (the lease deadline the jobs were claimed with)
-- ARGV[2..] -> job ids
--
-- Returns the number of jobs acked.
local inflight = KEYS[1]
local token = tonumber(ARGV[1])

local acked = 0
for i = 2, #ARGV do
  local score = redis.call('ZSCORE', inflight, ARGV[i])
  if score and tonumber(score) == token then
    redis.call('ZREM', inflight, ARGV[i])
    acked = acked + 1
  end
end
return acked
