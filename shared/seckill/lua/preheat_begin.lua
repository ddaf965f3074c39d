-- preheat_begin: open a preheat of an item: its intent record, which says
-- what the preheat will do (the new version and settings, how many shards
-- it touches), where it stands (its phase) and until when it may take
-- (its deadline, a number of ms, never a TTL). One intent at a time: the
-- intent is what makes two preheats of one item never interleave, and what
-- lets another finish (or undo) a preheat whose container died or stalled.
--
-- The version is this preheat's fence on every shard: later than any the
-- item had (ARGV[4], read from the shards by the caller; the intent's own
-- "last", kept when an intent ends), and than now.
--
-- KEYS[1] -> the item's intent (hash: phase, owner, version, deadline,
--            touched, shards, stock, starts, ends, limit, price, currency,
--            window, last)
-- ARGV[1] -> owner: a token of this preheat call
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> deadline, unix ms: past it, another may finish or undo it
-- ARGV[4] -> the least version the item may take
-- ARGV[5] -> shards touched (old and new: every one whose meta changes)
-- ARGV[6] -> shards of the new sale
-- ARGV[7..13] -> stock, starts, ends, per-user limit, price ("" for none),
--            currency ("" for none), payment window ms
--
-- Returns {1, version}: begun (or begun already by this owner: a resent
-- call); {2, version, deadline}: another preheat is under way; {3, version}:
-- another preheat's intent is past its deadline (the caller recovers it,
-- then begins again); {4, last}: a preheat began at or after this call's
-- deadline (the call is past it). Nothing is written unless it answers 1.
local i = redis.call('HMGET', KEYS[1], 'phase', 'owner', 'version', 'deadline', 'last')
if i[1] then
  if i[2] == ARGV[1] then
    return {1, i[3]}
  end
  if tonumber(ARGV[2]) < tonumber(i[4]) then
    return {2, i[3], i[4]}
  end
  return {3, i[3]}
end
-- A preheat begun at or after this call's deadline means this call is
-- past it: a resend of a begin whose intent was rolled back meanwhile (its
-- view of the shards is stale). Versions are at least the time they were
-- begun at.
if i[5] and tonumber(i[5]) >= tonumber(ARGV[3]) then
  return {4, i[5]}
end
local version = math.max(tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(i[5] or '0') + 1)
version = string.format('%d', version)
redis.call('HSET', KEYS[1], 'phase', 'freezing', 'owner', ARGV[1], 'version', version, 'deadline', ARGV[3],
  'touched', ARGV[5], 'shards', ARGV[6], 'stock', ARGV[7], 'starts', ARGV[8], 'ends', ARGV[9], 'limit', ARGV[10],
  'price', ARGV[11], 'currency', ARGV[12], 'window', ARGV[13], 'last', version)
return {1, version}
