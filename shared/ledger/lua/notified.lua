-- notified: record that finance was told of a withdrawal's final outcome;
-- the withdrawal leaves the shard's open set.
--
-- KEYS[1] -> withdrawal record
-- KEYS[2] -> open set of the shard
-- ARGV[1] -> withdrawal id
--
-- Returns 1 when recorded, 0 when there is no such record.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'notified', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
