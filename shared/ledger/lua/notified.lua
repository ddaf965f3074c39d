-- notified: record that finance was told of a withdrawal's outcome; the
-- withdrawal leaves the shard's open set unless its status moved on
-- meanwhile (paid, then returned: finance is told again).
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> open set of the shard
-- ARGV[1] -> withdrawal id
-- ARGV[2] -> the status finance was told of
--
-- Returns 1 when recorded, 0 when there is no such record or it is no longer
-- in that status. Safe to run twice.
local cur = redis.call('HMGET', KEYS[1], 'status', 'told')
if cur[1] ~= ARGV[2] then
  return 0
end
if cur[2] ~= ARGV[2] then
  redis.call('HSET', KEYS[1], 'told', ARGV[2])
  redis.call('HINCRBY', KEYS[1], 'rev', 1)
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
