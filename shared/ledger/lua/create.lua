-- create: store a new withdrawal, schedule it and complete its idempotency
-- reservation, all at once.
--
-- KEYS[1] -> withdrawal record (hash)
-- KEYS[2] -> the user's withdrawal index (sorted set, all scores 0, ids by lex order)
-- KEYS[3] -> delay-queue due set of the shard
-- KEYS[4] -> idempotency record
-- KEYS[5] -> open set of the shard (member: id, score: when to look at it again)
-- ARGV[1] -> withdrawal id
-- ARGV[2] -> due time, unix ms
-- ARGV[3] -> response body to replay for the idempotency key
-- ARGV[4..] -> record field, value, field, value, ...
--
-- Returns 1 when created, 0 when the record exists, -1 when the reservation is
-- no longer held for this id.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local held = redis.call('HMGET', KEYS[4], 'state', 'id')
if held[1] ~= 'pending' or held[2] ~= ARGV[1] then
  return -1
end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[4], 'state', 'done', 'resp', ARGV[3])
redis.call('HDEL', KEYS[4], 'until')
return 1
