-- preheat_end: close a preheat's intent once it was rolled forward or back
-- on every shard it touches. The version counter ("last") stays, so that
-- the item's versions only grow.
--
-- KEYS[1] -> the item's intent
-- ARGV[1] -> version of the preheat
--
-- Returns 1 when closed, 0 when there was no such intent to close (closed
-- already, or never past freezing).
local i = redis.call('HMGET', KEYS[1], 'phase', 'version')
if i[2] ~= ARGV[1] or (i[1] ~= 'committed' and i[1] ~= 'aborting') then
  return 0
end
redis.call('HDEL', KEYS[1], 'phase', 'owner', 'version', 'deadline', 'touched', 'shards', 'stock', 'starts', 'ends',
  'limit', 'price', 'currency', 'window')
return 1
