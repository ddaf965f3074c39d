-- purge_keys: forget idempotency records past their retention.
--
-- KEYS[1] -> idempotency expiry set (member: record key name, score: expiry, unix ms)
-- KEYS[2..] -> idempotency records that the caller found expired
-- ARGV[1] -> now, unix ms
--
-- Returns the number of records removed. Each is checked again here, so a key
-- reused since the caller looked is kept.
local now = tonumber(ARGV[1])
local removed = 0
for i = 2, #KEYS do
  local expires = redis.call('ZSCORE', KEYS[1], KEYS[i])
  if expires and tonumber(expires) <= now then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[1], KEYS[i])
    removed = removed + 1
  end
end
return removed
