-- admit: admit or refuse one purchase attempt on the buyer's home shard: the
-- sale window, the per-user limit, the order backlog and the stock, and for an
-- admitted purchase its record and its order job, all in one step.
--
-- The item's settings (window, limit) come from the caller's copy of them,
-- tied to the item's version: a copy of another version (the item was
-- preheated since) is refused with code 1 and nothing done, and the caller
-- reads the settings again. So the script reads only what changes.
--
-- KEYS[1] -> item shard meta (hash: version, left, pending, ...)
-- KEYS[2] -> buyers (hash: user -> "<quantity>|<pid>@<shard>,...")
-- KEYS[3] -> purchases (hash: pid -> record)
-- KEYS[4] -> holds (sorted set: "<pid>|<quantity>|<user>" by deadline)
-- KEYS[5] -> order queue due set
-- ARGV[1] -> user id
-- ARGV[2] -> quantity
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> purchase id for this attempt
-- ARGV[5] -> item version the settings below belong to
-- ARGV[6] -> order backlog limit of the shard
-- ARGV[7] -> hold deadline, unix ms (used when this shard has no stock)
-- ARGV[8] -> this shard's number
-- ARGV[9] -> sale start, unix ms
-- ARGV[10] -> sale end, unix ms
-- ARGV[11] -> per-user limit
-- ARGV[12] -> shard count
--
-- Returns {code, version, extra}: 0 unknown item; 1 the item has another
-- version (nothing done); 2 not started (extra: starts); 3 ended; 4 per-user
-- limit reached; 5 backlog full; 6 admitted (extra: stock left); 7 sold out;
-- 8 no stock here: the user's quantity is held against the limit and the
-- caller may take stock from another shard; 10 quantity above the per-user
-- limit (extra: the limit). A repeated attempt with the same purchase id
-- answers as the first did.
local meta = redis.call('HMGET', KEYS[1], 'version', 'left', 'pending')
local version = meta[1]
if not version then
  return {0, '0'}
end
if version ~= ARGV[5] then
  return {1, version}
end
local now = tonumber(ARGV[3])
if now < tonumber(ARGV[9]) then
  return {2, version, ARGV[9]}
end
if now >= tonumber(ARGV[10]) then
  return {3, version}
end

local user = ARGV[1]
local qty = tonumber(ARGV[2])
local pid = ARGV[4]
local limit = tonumber(ARGV[11])
if qty > limit then
  return {10, version, ARGV[11]}
end
local left = tonumber(meta[2])
local pending = tonumber(meta[3])
local record = '|' .. ARGV[3] .. '|' .. ARGV[3] .. '|' .. ARGV[8] .. '|0||' .. user

-- The common case of a flash sale, one unit per buyer with stock and room
-- in the backlog, takes one command less: HSETNX both checks that the user
-- has not bought and records the purchase.
if limit == 1 and left >= 1 and pending < tonumber(ARGV[6]) then
  if redis.call('HSETNX', KEYS[2], user, '1|' .. pid .. '@' .. ARGV[8]) == 1 then
    redis.call('HSET', KEYS[1], 'left', left - 1, 'pending', pending + 1)
    redis.call('HSET', KEYS[3], pid, 'reserved|1' .. record)
    redis.call('ZADD', KEYS[5], ARGV[3], pid)
    return {6, version, left - 1}
  end
end

local bought = 0
local list = ''
local entry = redis.call('HGET', KEYS[2], user)
if entry then
  local q, l = string.match(entry, '^(%d+)|(.*)$')
  bought = tonumber(q)
  list = l
  local at = string.match(',' .. list .. ',', ',' .. pid .. '@([^,]*),')
  if at == '-' then
    return {8, version}
  elseif at then
    return {6, version, left}
  end
end
if bought + qty > limit then
  return {4, version}
end
if pending >= tonumber(ARGV[6]) then
  return {5, version}
end

if list ~= '' then
  list = list .. ','
end
if left >= qty then
  redis.call('HSET', KEYS[1], 'left', left - qty, 'pending', pending + 1)
  redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@' .. ARGV[8])
  redis.call('HSET', KEYS[3], pid, 'reserved|' .. qty .. record)
  redis.call('ZADD', KEYS[5], ARGV[3], pid)
  return {6, version, left - qty}
end
if ARGV[12] == '1' then
  return {7, version}
end
redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@-')
redis.call('ZADD', KEYS[4], ARGV[7], pid .. '|' .. qty .. '|' .. user)
return {8, version}
