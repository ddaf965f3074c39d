-- retire: take one shard of an item out of polling: only when its order
-- queue is empty (nothing due, leased or dead), no hold is open, no preheat
-- has it frozen and, if it holds a sale, the sale has ended with nothing
-- pending. A retired shard refuses what could queue a job there: admission
-- and takes (its stock left is moved aside, as a freeze does) and order
-- events (enqueue_event.lua; they go to the always-polled events queue).
-- Checked and marked in one step, so nothing lands in the queue between
-- "empty" and "retired". A preheat that takes the shard into a sale again
-- resets it (reset.lua), which ends the retirement.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> order queue due set
-- KEYS[3] -> order queue inflight set
-- KEYS[4] -> order queue dead set
-- KEYS[5] -> holds
-- ARGV[1] -> now, unix ms
--
-- Returns 1 retired (now or before), 0 not (nothing changed).
local m = redis.call('HMGET', KEYS[1], 'retired', 'frozen', 'version', 'ends', 'stock', 'confirmed', 'paid')
-- Frozen first: a preheat that freezes a retired shard takes it back into
-- a sale (it registers, then resets the shard). Until its reset, the
-- shard's meta still reads retired and past its end; answering "retired"
-- then would let the compensation pass forget the item the preheat just
-- registered, and the new sale's order jobs would sit in a queue nobody
-- polls.
if m[2] then
  return 0
end
if m[1] then
  return 1
end
for i = 2, 5 do
  if redis.call('ZCARD', KEYS[i]) > 0 then
    return 0
  end
end
if m[3] then
  if tonumber(ARGV[1]) < tonumber(m[4]) then
    return 0
  end
  local field = 'left:' .. m[3]
  local left = redis.call('HGET', KEYS[1], field)
  if tonumber(m[5]) - tonumber(left or m[5]) - tonumber(m[6] or 0) - tonumber(m[7] or 0) > 0 then
    return 0
  end
  if left then
    redis.call('HDEL', KEYS[1], field)
    redis.call('HSET', KEYS[1], 'left_aside', left)
  end
end
redis.call('HSET', KEYS[1], 'retired', '1')
return 1
