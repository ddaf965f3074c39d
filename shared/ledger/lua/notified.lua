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
if redis.call('HGET', KEYS[1], 'status') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'told', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
