-- settle_order: end a reserved purchase: confirmed with its order id, or
-- released with its stock given back to the shard.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- ARGV[1] -> purchase id
-- ARGV[2] -> "confirmed" or "released"
-- ARGV[3] -> order id ("" when released)
-- ARGV[4] -> now, unix ms
--
-- Returns {code, record}: 0 no such purchase (the item was re-preheated);
-- 1 done now; 2 it had ended already (record as it stands).
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {0, ''}
end
local status, qty, created, _, home, requeues, _, user =
  string.match(rec, '^(%a+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
if status ~= 'reserved' then
  return {2, rec}
end
local out = ARGV[2] .. '|' .. qty .. '|' .. created .. '|' .. ARGV[4] .. '|' .. home .. '|' .. requeues .. '|' .. ARGV[3] .. '|' .. user
redis.call('HSET', KEYS[2], ARGV[1], out)
redis.call('HINCRBY', KEYS[1], 'pending', -1)
if ARGV[2] == 'confirmed' then
  redis.call('HINCRBY', KEYS[1], 'confirmed', qty)
else
  redis.call('HINCRBY', KEYS[1], 'left', qty)
  redis.call('HINCRBY', KEYS[1], 'released', qty)
end
return {1, out}
