-- preheat: reset one item shard for a new sale: buyers, purchases, holds and
-- order queue are dropped, and the shard gets its part of the stock, its
-- price and payment window. A shard whose admitted purchases still wait for
-- their orders or for their payment (units that left the stock and were
-- neither confirmed, paid nor given back) is left alone. Event jobs (the
-- order events' outbox, "ev|...") of the old sale stay queued, so no event
-- is lost to a preheat.
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
-- ARGV[7] -> price of a unit ("" for none)
-- ARGV[8] -> currency ("" for none)
-- ARGV[9] -> payment window, ms ("0" for none)
--
-- Returns 1 when reset (or reset already by this very preheat), 0 when
-- orders are pending.
--
-- Run twice with the same ARGV (a lost reply that the client retries, maybe
-- after buyers were admitted under the new version), the second run finds
-- the shard holding exactly this version and these settings and leaves it
-- alone: resetting it again would drop those buyers, and refusing (their
-- orders are pending) would fail a preheat that happened.
local m = redis.call('HMGET', KEYS[1], 'version', 'stock', 'confirmed', 'shards', 'starts', 'ends', 'limit', 'paid', 'price',
  'currency', 'window')
if m[1] == ARGV[1] and m[4] == ARGV[2] and m[5] == ARGV[3] and m[6] == ARGV[4] and m[7] == ARGV[5] and m[2] == ARGV[6]
    and (m[9] or '') == ARGV[7] and (m[10] or '') == ARGV[8] and (m[11] or '0') == ARGV[9] then
  return 1
end
if m[1] then
  local left = redis.call('HGET', KEYS[1], 'left:' .. m[1])
  if tonumber(m[2]) - tonumber(left or m[2]) - tonumber(m[3] or 0) - tonumber(m[8] or 0) > 0 then
    return 0
  end
end
-- The outbox: every event job, due or leased (a leased one may be on its
-- way; it goes out again, at least once), is queued again as it was.
local keep = {}
for _, set in ipairs({KEYS[5], KEYS[6]}) do
  local all = redis.call('ZRANGE', set, 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 3) == 'ev|' then
      keep[#keep + 1] = all[i + 1]
      keep[#keep + 1] = all[i]
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7])
for i = 1, #keep, 2 do
  redis.call('ZADD', KEYS[5], keep[i], keep[i + 1])
end
if ARGV[2] ~= '0' then
  redis.call('HSET', KEYS[1], 'version', ARGV[1], 'shards', ARGV[2], 'starts', ARGV[3], 'ends', ARGV[4],
    'limit', ARGV[5], 'stock', ARGV[6], 'left:' .. ARGV[1], ARGV[6], 'confirmed', 0, 'released', 0,
    'awaiting', 0, 'paid', 0, 'expired', 0, 'window', ARGV[9])
  if ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], 'price', ARGV[7], 'currency', ARGV[8])
  end
end
return 1
