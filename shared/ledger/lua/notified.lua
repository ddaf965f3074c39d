-- notified: record that finance was told of a withdrawal's final outcome.
--
-- KEYS[1] -> withdrawal record
--
-- Returns 1 when recorded, 0 when there is no such record.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'notified', '1')
return 1
