-- reset: phase 2 of a committed preheat, on one shard: its sale is replaced.
-- Buyers, purchases and holds are dropped, and the meta is written for the
-- new sale (the shard's part of the stock, window, limit, price and payment
-- window), or, for a shard the new sale does not use (ARGV[2] = "0"), left
-- without a sale ("dropped": no admission, no take). The shard's order queue
-- is never touched: order events, expiry and order jobs of the earlier
-- sale, due, leased or dead, stay and are delivered (the registry keeps the
-- shard polled while its queue holds any).
--
-- Only a shard frozen by this preheat is reset. Run again (a resent call,
-- or another container rolling the preheat forward), it finds the shard
-- reset by this version and leaves it alone, buyers admitted since
-- included.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> buyers
-- KEYS[3] -> purchases
-- KEYS[4] -> holds
-- ARGV[1] -> version of the preheat
-- ARGV[2] -> shards of the new sale ("0": this shard is dropped from it)
-- ARGV[3] -> starts, unix ms
-- ARGV[4] -> ends, unix ms
-- ARGV[5] -> per-user limit
-- ARGV[6] -> this shard's stock
-- ARGV[7] -> price of a unit ("" for none)
-- ARGV[8] -> currency ("" for none)
-- ARGV[9] -> payment window, ms ("0" for none)
--
-- Returns 1 when reset (now, or before by this preheat); 0 when the shard is
-- not this preheat's to reset (it was rolled back, or a later preheat has
-- it): nothing changed.
local m = redis.call('HMGET', KEYS[1], 'frozen', 'version', 'dropped', 'retired')
if m[1] ~= ARGV[1] then
  if m[2] == ARGV[1] or m[3] == ARGV[1] then
    return 1
  end
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if ARGV[2] == '0' then
  redis.call('HSET', KEYS[1], 'dropped', ARGV[1])
  if m[4] then
    redis.call('HSET', KEYS[1], 'retired', '1')
  end
  return 1
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'shards', ARGV[2], 'starts', ARGV[3], 'ends', ARGV[4],
  'limit', ARGV[5], 'stock', ARGV[6], 'left:' .. ARGV[1], ARGV[6], 'confirmed', 0, 'released', 0,
  'awaiting', 0, 'paid', 0, 'expired', 0, 'window', ARGV[9])
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'price', ARGV[7], 'currency', ARGV[8])
end
return 1
