-- admit: admit or refuse one purchase attempt on the buyer's home shard: the
-- sale window, the per-user limit, the order backlog and the stock, and for an
-- admitted purchase the buyer's entry and its order job, all in one step.
--
-- Every command counts here (Redis's one core is the limit of a flash sale),
-- so the script reads only what changes and writes only what it must:
--   * on the common path the item's settings (window, limit) are the
--     caller's copy of them, tied to the item's version: the stock left is
--     kept in the field "left:<version>", so a copy of another version finds
--     no stock under its field, and is refused with code 1 (nothing done)
--     when the script looks closer; the caller then reads the settings
--     again;
--   * a purchase made on its buyer's home shard has no record while it is
--     reserved: the buyer's entry lists it with its quantity and its order
--     job names it ("<pid>|<quantity>|<home>|<user>"); settling it writes
--     its record (see settle_order.lua);
--   * the common case, a buyer's first purchase inside the window with stock
--     and room in the backlog (ARGV[8] = "1" when the caller's settings say
--     so), is four commands: ZCARD, HINCRBY, HSETNX, ZADD. Anything else undoes
--     the HINCRBY and takes the general path, which reads the settings of
--     the item's version from its meta;
--   * a shard frozen by a preheat under way (freeze.lua) or retired
--     (retire.lua) has its stock left moved aside, out of "left:<version>":
--     the common path finds no stock there and falls through, at no cost
--     to the common case, to the general path, which refuses;
--   * ZCARD counts every job of the order queue, due or not: below the
--     backlog limit it proves room in O(1); only at or above it (a backlog
--     near full, or many payment-expiry jobs due later) are the jobs due now
--     counted (ZCOUNT), so future jobs never refuse a buyer;
--   * what the common path needs comes ready-made in ARGV (the decrement,
--     the order job, the buyer's entry): every argument is a Lua string
--     made for each call and every string built in Lua is one more, so the
--     script gets few and builds none there.
--
-- KEYS[1] -> item shard meta (hash: version, left:<version>, starts, ends,
--            limit, shards, frozen, retired, ...)
-- KEYS[2] -> buyers (hash: user -> "<total>|<pid>@<shard>:<quantity>[!],...";
--            the shard is "-" while held)
-- KEYS[3] -> holds (sorted set: "<pid>|<quantity>|<user>" by deadline)
-- KEYS[4] -> order queue due set
-- ARGV[1] -> user id
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> the stock field of the version the caller's settings belong to
-- ARGV[4] -> the quantity, negated: the stock's decrement ("-1")
-- ARGV[5] -> order backlog limit of the shard (jobs due and waiting: the
--            expiry jobs of orders awaiting payment, due later, do not count)
-- ARGV[6] -> the order job ("<pid>|<quantity>|<shard>|<user>"; the general
--            path reads the purchase id and this shard's number from it)
-- ARGV[7] -> the buyer's entry after a first purchase
-- ARGV[8] -> "1" when, under the caller's settings, the attempt is inside
--            the window and within the per-user limit
-- ARGV[9] -> hold deadline, unix ms (used when this shard has no stock)
--
-- Returns the stock left (an integer) when admitted on the common path, else
-- {code, version, extra}: 0 unknown item; 1 the item has another version
-- (nothing done); 2 not started (extra: starts); 3 ended; 4 per-user limit
-- reached; 5 backlog full; 6 admitted (extra: stock left); 7 sold out
-- (extra: stock left, fewer than asked for); 8 not enough stock here (extra:
-- stock left, absent on a repeat): the user's quantity is held against the
-- limit and the caller may take stock from another shard; 10 quantity above the per-user limit
-- (extra: the limit); 11 a preheat of the item is under way (the shard is
-- frozen, whatever sale it held: retry shortly). 3 also answers on a shard retired after its sale.
-- A repeated attempt with the same purchase id answers as the first did.
local field, backlog = ARGV[3], tonumber(ARGV[5])
-- Whether the backlog has room; nil until counted.
local room
if ARGV[8] == '1' then
  room = redis.call('ZCARD', KEYS[4]) < backlog or redis.call('ZCOUNT', KEYS[4], '-inf', ARGV[2]) < backlog
  if room then
    local left = redis.call('HINCRBY', KEYS[1], field, ARGV[4])
    if left >= 0 and redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[7]) == 1 then
      redis.call('ZADD', KEYS[4], ARGV[2], ARGV[6])
      return left
    end
    redis.call('HINCRBY', KEYS[1], field, -tonumber(ARGV[4]))
  end
end

local meta = redis.call('HMGET', KEYS[1], 'version', field, 'starts', 'ends', 'limit', 'shards', 'frozen', 'retired')
local version = meta[1]
if not version or 'left:' .. version ~= field or meta[7] or meta[8] then
  -- The undone HINCRBY above may have left the field of a version that is
  -- not (or no longer) the item's, or of a shard whose stock left is set
  -- aside (frozen by a preheat, or retired): drop it (and the hash, if it
  -- was all).
  redis.call('HDEL', KEYS[1], field)
  if meta[7] then
    -- Frozen by a preheat under way, whatever the shard held before: no
    -- sale yet (a shard the new sale adds), or another version.
    return {11, version or '0'}
  elseif not version then
    return {0, '0'}
  elseif 'left:' .. version ~= field then
    return {1, version}
  end
  return {3, version}
end
-- The item is at the caller's version: its settings are the caller's.
local now = tonumber(ARGV[2])
if now < tonumber(meta[3]) then
  return {2, version, meta[3]}
end
if now >= tonumber(meta[4]) then
  return {3, version}
end
local limit = tonumber(meta[5])
local qty = -tonumber(ARGV[4])
if qty > limit then
  return {10, version, meta[5]}
end

local user = ARGV[1]
local pid, shard = string.match(ARGV[6], '^([^|]*)|%d+|(%d+)|')
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
if room == nil then
  room = redis.call('ZCOUNT', KEYS[4], '-inf', ARGV[2]) < backlog
end
if not room then
  return {5, version}
end

if list ~= '' then
  list = list .. ','
end
if left >= qty then
  redis.call('HINCRBY', KEYS[1], field, -qty)
  redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@' .. shard .. ':' .. qty)
  redis.call('ZADD', KEYS[4], ARGV[2], ARGV[6])
  return {6, version, left - qty}
end
if meta[6] == '1' then
  return {7, version, left}
end
redis.call('HSET', KEYS[2], user, (bought + qty) .. '|' .. list .. pid .. '@-:' .. qty)
redis.call('ZADD', KEYS[3], ARGV[9], pid .. '|' .. qty .. '|' .. user)
return {8, version, left}
