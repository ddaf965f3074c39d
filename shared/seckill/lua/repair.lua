-- repair: follow up a purchase still reserved after the compensation timeout.
-- If its order job is still scheduled or leased, it is on its way: nothing to
-- do. If the job was lost or given up on (dead), enqueue it again, at most
-- ARGV[3] times; after that, release the purchase and its stock.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- KEYS[3] -> order queue due set
-- KEYS[4] -> order queue inflight set
-- KEYS[5] -> order queue dead set
-- ARGV[1] -> purchase id
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> most re-enqueues
-- ARGV[4] -> created before this (unix ms) counts as overdue
--
-- Returns {code, record}: 0 nothing to do; 1 re-enqueued; 2 released.
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {0, ''}
end
local status, qty, created, _, home, requeues, order, user =
  string.match(rec, '^(%a+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
if status ~= 'reserved' or tonumber(created) >= tonumber(ARGV[4]) then
  return {0, rec}
end
if redis.call('ZSCORE', KEYS[3], ARGV[1]) or redis.call('ZSCORE', KEYS[4], ARGV[1]) then
  return {0, rec}
end
redis.call('ZREM', KEYS[5], ARGV[1])
if tonumber(requeues) < tonumber(ARGV[3]) then
  local out = 'reserved|' .. qty .. '|' .. created .. '|' .. ARGV[2] .. '|' .. home .. '|' .. (tonumber(requeues) + 1) .. '|' .. order .. '|' .. user
  redis.call('HSET', KEYS[2], ARGV[1], out)
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
  return {1, out}
end
local out = 'released|' .. qty .. '|' .. created .. '|' .. ARGV[2] .. '|' .. home .. '|' .. requeues .. '||' .. user
redis.call('HSET', KEYS[2], ARGV[1], out)
redis.call('HINCRBY', KEYS[1], 'pending', -1)
redis.call('HINCRBY', KEYS[1], 'left', qty)
redis.call('HINCRBY', KEYS[1], 'released', qty)
return {2, out}
