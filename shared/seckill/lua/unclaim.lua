-- unclaim: on the buyer's home shard, give a purchase's quantity back to the
-- user's limit: after a hold found no stock anywhere (ARGV[4] names the hold;
-- the entry goes, as there is no purchase), or after the purchase was
-- released (the entry stays, marked "!", so the user still sees it). Safe to
-- repeat: a quantity is given back once.
--
-- KEYS[1] -> buyers (hash: user -> "<quantity>|<pid>@<shard>[!],...")
-- KEYS[2] -> holds
-- ARGV[1] -> user id
-- ARGV[2] -> purchase id
-- ARGV[3] -> quantity
-- ARGV[4] -> hold member, or "" when there is no hold
--
-- Returns 1 when given back, 0 when there was nothing to give back.
local hold = ARGV[4] ~= ''
if hold and redis.call('ZREM', KEYS[2], ARGV[4]) == 0 then
  return 0
end
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
local q, list = string.match(entry, '^(%d+)|(.*)$')
local prefix = ARGV[2] .. '@'
local out = {}
local done = false
for item in string.gmatch(list, '[^,]+') do
  if not done and string.sub(item, 1, #prefix) == prefix and string.sub(item, -1) ~= '!' then
    done = true
    if not hold then
      out[#out + 1] = item .. '!'
    end
  else
    out[#out + 1] = item
  end
end
if not done then
  return 0
end
local rest = math.max(tonumber(q) - tonumber(ARGV[3]), 0)
if #out == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], rest .. '|' .. table.concat(out, ','))
end
return 1
