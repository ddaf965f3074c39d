-- end_order: end a purchase awaiting payment as its order ended in the order
-- ledger: paid (its expiry job, if still scheduled, is dropped), or expired
-- (its stock back to the shard, so the unit sells again; the buyer's limit
-- is given back on the home shard by unclaim.lua). The order's event job
-- (the outbox, ARGV[5]) is enqueued, due now, in the same step.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- KEYS[3] -> order queue due set
-- ARGV[1] -> purchase id
-- ARGV[2] -> "paid" or "expired"
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> the expiry job
-- ARGV[5] -> the event job
--
-- Returns {code, record}: 0 no such purchase (the item was re-preheated);
-- 1 done now; 2 it was not awaiting payment (record as it stands). Run
-- again, it answers 2 and changes nothing.
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then
  return {0, ''}
end
local status = string.match(rec, '^([%a_]+)|')
if status ~= 'awaiting_payment' then
  return {2, rec}
end
local qty, created, tail = string.match(rec, '^[%a_]+|(%d+)|(%d+)|%d+|(.*)$')
local out = ARGV[2] .. '|' .. qty .. '|' .. created .. '|' .. ARGV[3] .. '|' .. tail
redis.call('HSET', KEYS[2], ARGV[1], out)
redis.call('HINCRBY', KEYS[1], 'awaiting', -tonumber(qty))
redis.call('HINCRBY', KEYS[1], ARGV[2], qty)
if ARGV[2] == 'paid' then
  redis.call('ZREM', KEYS[3], ARGV[4])
else
  local version = redis.call('HGET', KEYS[1], 'version')
  if version then
    redis.call('HINCRBY', KEYS[1], 'left:' .. version, qty)
  end
end
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[5])
return {1, out}
