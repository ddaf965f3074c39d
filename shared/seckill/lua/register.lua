-- register: list an item in the registry for a committed preheat: its
-- sale's shard count and the shards whose order queues the poller drains,
-- "<shards>/<polled>/<version>" (an entry of the first layout, "<shards>",
-- is read as "<shards>/<shards>/0"). Polled shards only grow here: a shard
-- whose queue may still hold jobs (of an earlier sale with more shards)
-- stays polled until the compensation pass finds it empty and retires it
-- (registry_trim.lua). A slower container rolling an earlier preheat
-- forward never overwrites a later one's sale.
--
-- KEYS[1] -> the registry (hash: item -> entry)
-- ARGV[1] -> item id
-- ARGV[2] -> shards of the sale
-- ARGV[3] -> shards to poll at least (every shard the preheat touched)
-- ARGV[4] -> version of the preheat
--
-- Returns the entry after.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local shards, polled, version = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if cur then
  local s, p, v = string.match(cur, '^(%d+)/(%d+)/(%d+)$')
  if not s then
    s, p, v = cur, cur, '0'
  end
  polled = math.max(polled, tonumber(p) or 0)
  if tonumber(v) > tonumber(version) then
    shards, version = tonumber(s), v
  end
end
polled = math.max(polled, shards)
local entry = string.format('%d/%d/%s', shards, polled, version)
redis.call('HSET', KEYS[1], ARGV[1], entry)
return entry
