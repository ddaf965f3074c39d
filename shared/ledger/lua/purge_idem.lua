-- purge_idem: forget the idempotency entries past their retention in one
-- page of the shard's idempotency hash, and move the shard's purge cursor
-- on. Reserve checks an entry's expiry itself, so an entry not reached yet
-- is never answered after its retention: the purge only frees the memory.
--
-- KEYS[1] -> the shard's idempotency hash (see reserve.lua)
-- KEYS[2] -> the shard's purge cursor (a string: the HSCAN cursor)
-- ARGV[1] -> now, unix ms
-- ARGV[2] -> page size (HSCAN COUNT)
--
-- Returns {removed, done}: done is 1 when the page ended a pass over the
-- hash (the cursor is back at 0).
local now = tonumber(ARGV[1])
local cursor = redis.call('GET', KEYS[2]) or '0'
local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', ARGV[2])
local removed = 0
local entries = page[2]
for i = 1, #entries, 2 do
  local expires = string.match(entries[i + 1], '|(%w+)$')
  if expires and tonumber(expires, 36) <= now then
    removed = removed + redis.call('HDEL', KEYS[1], entries[i])
  end
end
if page[1] == '0' then
  redis.call('DEL', KEYS[2])
  return {removed, 1}
end
redis.call('SET', KEYS[2], page[1])
return {removed, 0}
