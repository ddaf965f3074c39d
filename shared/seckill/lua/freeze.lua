-- freeze: phase 1 of a preheat, on one shard: check that no admitted
-- purchase of the shard waits for its order or its payment (units that left
-- the stock and were neither confirmed nor paid) and, in the same step,
-- freeze the shard for this preheat. Admission and takes are refused until
-- the shard is reset (the preheat committed) or unfrozen (rolled back). The
-- stock left is moved aside from its field "left:<version>", so admission's
-- common path (HINCRBY of that field) finds no stock and falls through to
-- its general path, which refuses a frozen shard: the hot path pays nothing.
--
-- A shard frozen by an earlier version is a leftover of a preheat rolled
-- back while one of its calls was still on its way (the caller holds the
-- item's intent, so no other preheat is under way): this preheat takes it
-- over, its stock left still aside.
--
-- KEYS[1] -> item shard meta
-- ARGV[1] -> version of the preheat
--
-- Returns 1 frozen (now, or already by this preheat); 0 orders pending:
-- nothing changed; {2, version} the shard is past this preheat (frozen or
-- reset by a later one, or fenced: this one was rolled back by another
-- container): nothing changed.
local m = redis.call('HMGET', KEYS[1], 'frozen', 'version', 'fence', 'dropped', 'retired', 'stock', 'confirmed', 'paid',
  'left_aside')
if m[1] == ARGV[1] then
  return 1
end
local v = tonumber(ARGV[1])
for i = 1, 4 do
  if m[i] and tonumber(m[i]) >= v then
    return {2, m[i]}
  end
end
local left, field = m[9], nil
if not m[1] and not m[5] and m[2] then
  field = 'left:' .. m[2]
  left = redis.call('HGET', KEYS[1], field)
end
if m[2] and tonumber(m[6]) - tonumber(left or m[6]) - tonumber(m[7] or 0) - tonumber(m[8] or 0) > 0 then
  return 0
end
if field and left then
  redis.call('HDEL', KEYS[1], field)
  redis.call('HSET', KEYS[1], 'left_aside', left)
end
redis.call('HSET', KEYS[1], 'frozen', ARGV[1])
return 1
