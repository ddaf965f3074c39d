-- reserve: claim a user's idempotency key for a create, or report its state.
--
-- KEYS[1] -> idempotency record (hash: state pending|done, fp, id, until, resp, user, key)
-- KEYS[2] -> idempotency expiry set (member: record key name, score: expiry, unix ms)
-- ARGV[1] -> request fingerprint
-- ARGV[2] -> withdrawal id to create if the key is free
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> lock deadline of a new reservation, unix ms
-- ARGV[5] -> expiry of the key, unix ms
-- ARGV[6] -> user id, ARGV[7] -> idempotency key (kept for operators)
--
-- Returns {phase, fingerprint, id, response}: phase 1 = acquired (create id),
-- 2 = in flight (another request holds it, or held it with another body),
-- 3 = completed (response is the first answer). A reservation held for
-- ARGV[2] is the caller's own (ids are unique to a request): run again with
-- the same ARGV (its reply was lost and the script sent again) it answers 1.
local rec = KEYS[1]
local exp = KEYS[2]
local now = tonumber(ARGV[3])

local cur = redis.call('HMGET', rec, 'state', 'fp', 'id', 'until', 'resp')
if cur[1] then
  local expires = redis.call('ZSCORE', exp, rec)
  if expires and tonumber(expires) <= now then
    redis.call('DEL', rec)
    cur[1] = false
  end
end
if not cur[1] then
  redis.call('HSET', rec, 'state', 'pending', 'fp', ARGV[1], 'id', ARGV[2], 'until', ARGV[4],
    'user', ARGV[6], 'key', ARGV[7])
  redis.call('ZADD', exp, ARGV[5], rec)
  return {1, ARGV[1], ARGV[2], ''}
end
if cur[1] == 'done' then
  return {3, cur[2], cur[3], cur[5]}
end
if cur[3] == ARGV[2] and cur[2] == ARGV[1] then
  return {1, cur[2], cur[3], ''}
end
-- A pending reservation whose request died may be taken over by a request
-- with the same body, which then creates the same withdrawal id.
if tonumber(cur[4]) > now or cur[2] ~= ARGV[1] then
  return {2, cur[2], cur[3], ''}
end
redis.call('HSET', rec, 'until', ARGV[4])
return {1, cur[2], cur[3], ''}
