-- admit: admit or refuse one purchase attempt on the buyer's home shard: the
-- sale window, the per-user limit, the order backlog and the stock, and for an
-- admitted purchase the buyer's entry and its order job, all in one step.
--
-- Every command counts here (Redis's one core is the limit of a flash sale),
-- so the script reads only what changes and writes only what it must:
--   * the item's settings (window, limit) come from the caller's copy of
--     them, tied to the item's version; the stock left is kept in the field
--     "left:<version>", so a copy of another version finds no stock under its
--     field, and is refused with code 1 (nothing done) when the script looks
--     closer; the caller then reads the settings again;
--   * a purchase made on its buyer's home shard has no record while it is
--     reserved: the buyer's entry lists it with its quantity and its order
--     job names it ("<pid>|<quantity>|<home>|<user>"); settling it writes
--     its record (see settle_order.lua);
--   * the common case, a buyer's first purchase inside the window with stock
--     and room in the backlog (ARGV[13] = "1" when the caller's settings say
--     so), is four commands: ZCOUNT, HINCRBY, HSETNX, ZADD. Anything else undoes
--     the HINCRBY and takes the general path.
--
-- KEYS[1] -> item shard meta (hash: version, left:<version>, ...)
-- KEYS[2] -> buyers (hash: user -> "<total>|<pid>@<shard>:<quantity>[!],...";
--            the shard is "-" while held)
-- KEYS[3] -> holds (sorted set: "<pid>|<quantity>|<user>" by deadline)
-- KEYS[4] -> order queue due set
-- ARGV[1] -> user id
-- ARGV[2] -> quantity
-- ARGV[3] -> now, unix ms
-- ARGV[4] -> purchase id for this attempt
-- ARGV[5] -> the stock field of the version the settings below belong to
-- ARGV[6] -> order backlog limit of the shard (jobs due and waiting: the
--            expiry jobs of orders awaiting payment, due later, do not count)
-- ARGV[7] -> hold deadline, unix ms (used when this shard has no stock)
-- ARGV[8] -> this shard's number
-- ARGV[9] -> sale start, unix ms
-- ARGV[10] -> sale end, unix ms
-- ARGV[11] -> per-user limit
-- ARGV[12] -> shard count
-- ARGV[13] -> "1" when, under these settings, the attempt is inside the window
--             and within the per-user limit
-- ARGV[14] -> the order job ("<pid>|<quantity>|<shard>|<user>")
-- ARGV[15] -> the buyer's entry after a first purchase
--
-- Returns the stock left (an integer) when admitted on the common path, else
-- {code, version, extra}: 0 unknown item; 1 the item has another version
-- (nothing done); 2 not started (extra: starts); 3 ended; 4 per-user limit
-- reached; 5 backlog full; 6 admitted (extra: stock left); 7 sold out
-- (extra: stock left, fewer than asked for); 8 not enough stock here (extra:
-- stock left, absent on a repeat): the user's quantity is held against the
-- limit and the caller may take stock from another shard; 10 quantity above the per-user limit
-- (extra: the limit). A repeated attempt with the same purchase id answers as
-- the first did.
local qty = tonumber(ARGV[2])
if ARGV[13] == '1' and redis.call('ZCOUNT', KEYS[4], '-inf', ARGV[3]) < tonumber(ARGV[6]) then
  local left = redis.call('HINCRBY', KEYS[1], ARGV[5], -qty)
  if left >= 0 and redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[15]) == 1 then
    redis.call('ZADD', KEYS[4], ARGV[3], ARGV[14])
    return left
  end
  redis.call('HINCRBY', KEYS[1], ARGV[5], qty)
end

local meta = redis.call('HMGET', KEYS[1], 'version', ARGV[5])
local version = meta[1]
if not version or 'left:' .. version ~= ARGV[5] then
  -- The undone HINCRBY above may have left the field of a version that is
  -- not (or no longer) the item's: drop it (and the hash, if it was all).
  redis.call('HDEL', KEYS[1], ARGV[5])
  if not version then
    return {0, '0'}
  end
  return {1, version}
end
local now = tonumber(ARGV[3])
if now < tonumber(ARGV[9]) then
  return {2, version, ARGV[9]}
end
if now >= tonumber(ARGV[10]) then
  return {3, version}
end
local limit = tonumber(ARGV[11])
if qty > limit then
  return {10, version, ARGV[11]}
end

local user = ARGV[1]
local pid = ARGV[4]
local left = tonumber(meta[2])
local bought = 0
local list = ''
local entry = redis.call('HGET', KEYS[2], user)
if entry then
  local q, l = string.match(entry, '^(%d+)|(.*)$')
  bought = tonumber(q)
  list = l
  local at = string.match(',' .. list .. ',', ',' .. pid .. '@([^,:]*)')
  if at == '-' then
    return {8, version}
  elseif at then
    return {6, version, left}
  end
end
if bought + qty > limit then
  return {4, version}
end
if redis.call('ZCOUNT', KEYS[4], '-inf', ARGV[3]) >= tonumber(ARGV[6]) then
  return {5, version}
end

if list ~= '' then
  list = list .. ','
end
if left >= qty then
  redis.call('HINCRBY', KEYS[1], ARGV[5], -qty)
  redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@' .. ARGV[8] .. ':' .. qty)
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[14])
  return {6, version, left - qty}
end
if ARGV[12] == '1' then
  return {7, version, left}
end
redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@-:' .. qty)
redis.call('ZADD', KEYS[3], ARGV[7], pid .. '|' .. qty .. '|' .. user)
return {8, version, left}
