-- pay: apply one payment event to an order of the Redis order ledger, as
-- decided by the caller on what it read: the event's result is recorded
-- (once per event id), and the order's end set, but only if the order's end
-- is still what the caller saw (a compare-and-set; the caller reads again
-- and decides again when it is not).
--
-- KEYS[1] -> the shard's payments hash (order terms, ends, payment events)
-- ARGV[1] -> the order's end field ("<order id>:end")
-- ARGV[2] -> the event's field ("<order id>|<event id>")
-- ARGV[3] -> the end the caller saw ("" for none)
-- ARGV[4] -> the end to set ("<end>|<at ms>"), or "" to leave it
-- ARGV[5] -> the event's result ("<outcome>|<end>|<at ms>")
--
-- Returns {code, result}: 1 applied; 2 the event was applied before (its
-- result then); 0 the end changed meanwhile (nothing done).
local rec = redis.call('HGET', KEYS[1], ARGV[2])
if rec then
  return {2, rec}
end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local seen = ''
if cur then
  seen = string.match(cur, '^([^|]*)')
end
if seen ~= ARGV[3] then
  return {0, ''}
end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[5])
return {1, ARGV[5]}
