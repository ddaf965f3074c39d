-- reserve: claim a user's idempotency key for a create, or report its state.
--
-- KEYS[1] -> the shard's idempotency hash (field: the key's digest, 16
--            bytes; value "<state p|d>|<fingerprint>|<id>|<time>|<expiry>":
--            time is the lock deadline while pending, the first answer's due
--            time once done; times unix ms in base 36, which keeps a value
--            within 80 bytes)
-- KEYS[2] -> the key's record of the first layout (hash: state pending|done,
--            fp, id, until, resp, user, key), read until it expires
-- KEYS[3] -> the first layout's expiry set (member: KEYS[2], score: expiry)
-- ARGV[1] -> request fingerprint (the ledger keeps its first 24 characters)
-- ARGV[2] -> withdrawal id to create if the key is free
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> lock deadline of a new reservation, unix ms
-- ARGV[5] -> expiry of the key, unix ms in base 36
-- ARGV[6] -> the key's digest (its field in KEYS[1])
-- ARGV[7] -> ARGV[4] in base 36
--
-- Returns {phase, fingerprint, id, response, due}: phase 1 = acquired
-- (create id), 2 = in flight (another request holds it, or held it with
-- another body), 3 = completed: response is the first answer where the
-- first layout kept it, else "" and due is the due time the first answer
-- gave, in base 36 (the rest of it is the record's). A reservation held for ARGV[2] is
-- the caller's own (ids are unique to a request): run again with the same
-- ARGV (its reply was lost and the script sent again) it answers 1.
local idem, field = KEYS[1], ARGV[6]
local now = tonumber(ARGV[3])

local state, fp, id, t, expires
local first = false
local resp = ''
local v = redis.call('HGET', idem, field)
if v then
  state, fp, id, t, expires = string.match(v, '^(%a)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if tonumber(expires, 36) <= now then
    redis.call('HDEL', idem, field)
    state = nil
  end
else
  local old = redis.call('HMGET', KEYS[2], 'state', 'fp', 'id', 'until', 'resp')
  if old[1] then
    local e = redis.call('ZSCORE', KEYS[3], KEYS[2])
    if e and tonumber(e) <= now then
      redis.call('DEL', KEYS[2])
      redis.call('ZREM', KEYS[3], KEYS[2])
    else
      first = true
      state = (old[1] == 'done') and 'd' or 'p'
      fp, id, t, resp = old[2], old[3], old[4], old[5] or ''
    end
  end
end
if not state then
  redis.call('HSET', idem, field, table.concat({'p', ARGV[1], ARGV[2], ARGV[7], ARGV[5]}, '|'))
  return {1, ARGV[1], ARGV[2], '', ''}
end
fp = string.sub(fp, 1, 24)
if state == 'd' then
  return {3, fp, id, resp, first and '' or t}
end
if id == ARGV[2] and fp == ARGV[1] then
  return {1, fp, id, '', ''}
end
-- A pending reservation whose request died may be taken over by a request
-- with the same body, which then creates the same withdrawal id.
if tonumber(t, first and 10 or 36) > now or fp ~= ARGV[1] then
  return {2, fp, id, '', ''}
end
if first then
  redis.call('HSET', KEYS[2], 'until', ARGV[4])
else
  redis.call('HSET', idem, field, table.concat({'p', fp, id, ARGV[7], expires}, '|'))
end
return {1, fp, id, '', ''}
