-- release: drop a pending reservation that failed before its create.
--
-- KEYS[1] -> idempotency record
-- KEYS[2] -> idempotency expiry set
-- ARGV[1] -> withdrawal id the reservation was made for
--
-- Returns 1 when released, 0 when the key was not pending for that id.
local cur = redis.call('HMGET', KEYS[1], 'state', 'id')
if cur[1] ~= 'pending' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
