-- settle: on the buyer's home shard, end a hold whose stock was taken from
-- shard ARGV[3]: the user's purchase list now says where the purchase lives.
--
-- KEYS[1] -> buyers
-- KEYS[2] -> holds
-- ARGV[1] -> user id
-- ARGV[2] -> purchase id
-- ARGV[3] -> shard that holds the purchase
-- ARGV[4] -> hold member
--
-- Returns 1.
redis.call('ZREM', KEYS[2], ARGV[4])
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry then
  local updated, n = string.gsub(entry, ARGV[2] .. '@%-', ARGV[2] .. '@' .. ARGV[3])
  if n > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], updated)
  end
end
return 1
