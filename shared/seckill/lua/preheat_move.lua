-- preheat_move: move a preheat's intent on from "freezing": to "committed"
-- (its owner, once every shard is frozen with nothing pending: from then on
-- the preheat is rolled forward, whoever finishes it), or to "aborting" (its
-- owner, refused; or anyone once its deadline passed: from then on it is
-- rolled back). Committed and aborting are final: an intent ends in one.
--
-- KEYS[1] -> the item's intent
-- ARGV[1] -> version of the preheat
-- ARGV[2] -> "commit", "abort" (the owner) or "recover" (anyone: abort only
--            past the deadline)
-- ARGV[3] -> now, unix ms
--
-- Returns the phase after ("freezing", "committed" or "aborting"), or "" when
-- the item has no intent of this version (it ended, or another's is open).
local i = redis.call('HMGET', KEYS[1], 'phase', 'version', 'deadline')
if not i[1] or i[2] ~= ARGV[1] then
  return ''
end
if i[1] ~= 'freezing' then
  return i[1]
end
local to
if ARGV[2] == 'commit' then
  to = 'committed'
elseif ARGV[2] == 'abort' or tonumber(ARGV[3]) >= tonumber(i[3]) then
  to = 'aborting'
else
  return i[1]
end
redis.call('HSET', KEYS[1], 'phase', to)
return to
