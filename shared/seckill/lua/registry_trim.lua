-- registry_trim: change an item's registry entry only if it is still the
-- one read (compare and set): fewer polled shards once the top ones are
-- retired, or no entry once every shard is (the item is forgotten). A
-- preheat that registered meanwhile wins.
--
-- KEYS[1] -> the registry
-- ARGV[1] -> item id
-- ARGV[2] -> the entry as read
-- ARGV[3] -> the entry to write ("" removes it)
--
-- Returns 1 when changed, 0 when the entry was not the one read.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
