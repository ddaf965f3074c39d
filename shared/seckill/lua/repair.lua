-- repair: follow up a purchase still reserved after the compensation timeout.
-- If its order job is still scheduled or leased, it is on its way: nothing to
-- do. If the job was lost or given up on (dead), enqueue it again, at most
-- ARGV[3] times; after that, release the purchase and its stock.
--
-- A purchase made on its buyer's home shard has no record while reserved
-- (see settle_order.lua): the buyer's entry there lists it, and ARGV[5..8]
-- say what its order job says of it.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- KEYS[3] -> order queue due set
-- KEYS[4] -> order queue inflight set
-- KEYS[5] -> order queue dead set
-- KEYS[6] -> buyers of this shard
-- ARGV[1] -> purchase id
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> most re-enqueues
-- ARGV[4] -> created before this (unix ms) counts as overdue
-- ARGV[5] -> user id
-- ARGV[6] -> quantity
-- ARGV[7] -> created, unix ms
-- ARGV[8] -> this shard's number
-- ARGV[9] -> the order job
--
-- Returns {code, record}: 0 nothing to do; 1 re-enqueued; 2 released.
local rec = redis.call('HGET', KEYS[2], ARGV[1])
local status, qty, created, updated, home, requeues, order, user
if rec then
  status, qty, created, updated, home, requeues, order, user =
    string.match(rec, '^(%a+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
else
  local entry = redis.call('HGET', KEYS[6], ARGV[5])
  if not entry or not string.find(',' .. string.match(entry, '|(.*)$') .. ',',
      ',' .. ARGV[1] .. '@' .. ARGV[8] .. ':' .. ARGV[6] .. ',', 1, true) then
    return {0, ''}
  end
  status, qty, created, home, requeues, order, user = 'reserved', ARGV[6], ARGV[7], ARGV[8], '0', '', ARGV[5]
  rec = ''
end
if status ~= 'reserved' or tonumber(created) >= tonumber(ARGV[4]) then
  return {0, rec}
end
if redis.call('ZSCORE', KEYS[3], ARGV[9]) or redis.call('ZSCORE', KEYS[4], ARGV[9]) then
  return {0, rec}
end
redis.call('ZREM', KEYS[5], ARGV[9])
if tonumber(requeues) < tonumber(ARGV[3]) then
  local out = 'reserved|' .. qty .. '|' .. created .. '|' .. ARGV[2] .. '|' .. home .. '|' .. (tonumber(requeues) + 1) .. '|' .. order .. '|' .. user
  redis.call('HSET', KEYS[2], ARGV[1], out)
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[9])
  return {1, out}
end
local out = 'released|' .. qty .. '|' .. created .. '|' .. ARGV[2] .. '|' .. home .. '|' .. requeues .. '||' .. user
redis.call('HSET', KEYS[2], ARGV[1], out)
local version = redis.call('HGET', KEYS[1], 'version')
if version then
  redis.call('HINCRBY', KEYS[1], 'left:' .. version, qty)
  redis.call('HINCRBY', KEYS[1], 'released', qty)
end
return {2, out}
