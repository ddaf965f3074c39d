-- take: take stock for a purchase from a shard other than the buyer's home,
-- whose limit the home shard holds for it until ARGV[6]. A purchase taken
-- here has a record from the start (the buyer's entry is on another shard).
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- KEYS[3] -> order queue due set
-- ARGV[1] -> user id
-- ARGV[2] -> quantity
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> purchase id
-- ARGV[5] -> order backlog limit of the shard (jobs due and waiting)
-- ARGV[6] -> hold deadline, unix ms: past it the hold may be undone, so no take
-- ARGV[7] -> the buyer's home shard
-- ARGV[8] -> item version the hold was made under
-- ARGV[9] -> the order job ("<pid>|<quantity>|<shard>|<user>")
--
-- Returns {code, extra}: 0 the item changed (re-preheated); 3 ended (or the
-- shard retired after its sale); 5 backlog full; 6 taken (extra: stock
-- left); 7 not enough stock here (extra: stock left); 9 hold expired; 11 a
-- preheat of the item is under way (the shard is frozen; see freeze.lua).
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 1 then
  return {6, -1}
end
local field = 'left:' .. ARGV[8]
local meta = redis.call('HMGET', KEYS[1], 'version', 'ends', field, 'frozen', 'retired')
-- Frozen first: a shard a preheat under way adds has no sale yet.
if meta[4] then
  return {11}
end
if meta[1] ~= ARGV[8] then
  return {0}
end
if meta[5] then
  return {3}
end
local now = tonumber(ARGV[3])
if now >= tonumber(ARGV[6]) then
  return {9}
end
if now >= tonumber(meta[2]) then
  return {3}
end
if redis.call('ZCOUNT', KEYS[3], '-inf', ARGV[3]) >= tonumber(ARGV[5]) then
  return {5}
end
local qty = tonumber(ARGV[2])
local left = tonumber(meta[3])
if left < qty then
  return {7, left}
end
redis.call('HINCRBY', KEYS[1], field, -qty)
redis.call('HSET', KEYS[2], ARGV[4], 'reserved|' .. qty .. '|' .. ARGV[3] .. '|' .. ARGV[3] .. '|' .. ARGV[7] .. '|0||' .. ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[9])
return {6, left - qty}
