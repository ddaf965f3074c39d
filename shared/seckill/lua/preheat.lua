-- preheat: reset one item shard for a new sale: buyers, purchases, holds and
-- order queue are dropped, and the shard gets its part of the stock. A shard
-- whose admitted purchases still wait for their orders (units that left the
-- stock and were neither confirmed nor given back) is left alone.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> buyers
-- KEYS[3] -> purchases
-- KEYS[4] -> holds
-- KEYS[5..7] -> order queue due, inflight and dead sets
-- ARGV[1] -> version
-- ARGV[2] -> shard count ("0" drops the shard: the item has fewer shards now)
-- ARGV[3] -> starts, unix ms
-- ARGV[4] -> ends, unix ms
-- ARGV[5] -> per-user limit
-- ARGV[6] -> this shard's stock
--
-- Returns 1 when reset (or reset already by this very preheat), 0 when
-- orders are pending.
--
-- Run twice with the same ARGV (a lost reply that the client retries, maybe
-- after buyers were admitted under the new version), the second run finds
-- the shard holding exactly this version and these settings and leaves it
-- alone: resetting it again would drop those buyers, and refusing (their
-- orders are pending) would fail a preheat that happened.
local m = redis.call('HMGET', KEYS[1], 'version', 'stock', 'confirmed', 'shards', 'starts', 'ends', 'limit')
if m[1] == ARGV[1] and m[4] == ARGV[2] and m[5] == ARGV[3] and m[6] == ARGV[4] and m[7] == ARGV[5] and m[2] == ARGV[6] then
  return 1
end
if m[1] then
  local left = redis.call('HGET', KEYS[1], 'left:' .. m[1])
  if tonumber(m[2]) - tonumber(left or m[2]) - tonumber(m[3] or 0) > 0 then
    return 0
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
if ARGV[2] ~= '0' then
  redis.call('HSET', KEYS[1], 'version', ARGV[1], 'shards', ARGV[2], 'starts', ARGV[3], 'ends', ARGV[4],
    'limit', ARGV[5], 'stock', ARGV[6], 'left:' .. ARGV[1], ARGV[6], 'confirmed', 0, 'released', 0)
end
return 1
