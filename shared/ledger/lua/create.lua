-- create: store a new withdrawal, schedule it and complete its idempotency
-- reservation, all at once. The idempotency entry keeps no response body:
-- the first answer is the record as created, which the record itself still
-- tells but for its due time (a reschedule or a retry moves the record's),
-- which the entry keeps.
--
-- KEYS[1] -> withdrawal record (hash)
-- KEYS[2] -> the user's withdrawal index (sorted set, all scores 0, ids by lex order)
-- KEYS[3] -> delay-queue due set of the shard
-- KEYS[4] -> the shard's idempotency hash (see reserve.lua)
-- KEYS[5] -> open set of the shard (member: id, score: when to look at it again)
-- KEYS[6] -> the key's record of the first layout (a reservation made
--            before the upgrade is completed in the new one)
-- KEYS[7] -> the first layout's expiry set
-- ARGV[1] -> withdrawal id
-- ARGV[2] -> due time, unix ms
-- ARGV[3] -> the idempotency key's digest (its field in KEYS[4])
-- ARGV[4] -> ARGV[2] in base 36
-- ARGV[5..] -> record field, value, field, value, ...
--
-- Returns 1 when created, 0 when the record exists, -1 when the reservation is
-- no longer held for this id.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local v = redis.call('HGET', KEYS[4], ARGV[3])
local fp, expires
if v then
  local state, id, _t
  state, fp, id, _t, expires = string.match(v, '^(%a)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if state ~= 'p' or id ~= ARGV[1] then
    return -1
  end
else
  local old = redis.call('HMGET', KEYS[6], 'state', 'id', 'fp')
  if old[1] ~= 'pending' or old[2] ~= ARGV[1] then
    return -1
  end
  fp = string.sub(old[3], 1, 24)
  -- (reserve always listed it; were it not, it would expire at the due time)
  local e = math.floor(tonumber(redis.call('ZSCORE', KEYS[7], KEYS[6]) or ARGV[2]))
  local digits = '0123456789abcdefghijklmnopqrstuvwxyz'
  expires = ''
  repeat
    local d = e % 36
    expires = string.sub(digits, d + 1, d + 1) .. expires
    e = (e - d) / 36
  until e == 0
  redis.call('DEL', KEYS[6])
  redis.call('ZREM', KEYS[7], KEYS[6])
end
redis.call('HSET', KEYS[4], ARGV[3], table.concat({'d', fp, ARGV[1], ARGV[4], expires}, '|'))
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
return 1
