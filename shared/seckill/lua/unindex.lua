-- unindex: drop an item from the index of open preheats (a sorted set of
-- items by their intent's deadline) only if its deadline is still the one
-- given: a preheat begun since has its own entry.
--
-- KEYS[1] -> the index of open preheats
-- ARGV[1] -> item id
-- ARGV[2] -> the deadline the entry had, unix ms
--
-- Returns 1 when dropped, 0 otherwise.
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not at or tonumber(at) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
