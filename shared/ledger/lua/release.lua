-- release: drop a pending reservation that failed before its create.
--
-- KEYS[1] -> the shard's idempotency hash (see reserve.lua)
-- KEYS[2] -> the key's record of the first layout
-- KEYS[3] -> the first layout's expiry set
-- ARGV[1] -> withdrawal id the reservation was made for
-- ARGV[2] -> the idempotency key's digest (its field in KEYS[1])
--
-- Returns 1 when released, 0 when the key was not pending for that id.
local v = redis.call('HGET', KEYS[1], ARGV[2])
if v then
  local state, _, id = string.match(v, '^(%a)|([^|]*)|([^|]*)|')
  if state ~= 'p' or id ~= ARGV[1] then
    return 0
  end
  redis.call('HDEL', KEYS[1], ARGV[2])
  return 1
end
local cur = redis.call('HMGET', KEYS[2], 'state', 'id')
if cur[1] ~= 'pending' or cur[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[3], KEYS[2])
return 1
