-- settle_order: end a reserved purchase: confirmed with its order id, or
-- released with its stock given back to the shard, or, for an item with a
-- payment window, awaiting_payment with its order id and pay-by time (the
-- record's order field is "<order id>@<pay by ms>"), its expiry job
-- scheduled at the pay-by time plus the payment grace (ARGV[12]). The order's order.created event job (the
-- outbox, ARGV[11]) is enqueued, due now, in the same step.
--
-- A purchase made on its buyer's home shard has no record while reserved:
-- the buyer's entry there lists it, and the caller passes what its order job
-- says of it (ARGV[5..8]). Otherwise the record says it all.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> purchases
-- KEYS[3] -> buyers of this shard
-- KEYS[4] -> order queue due set
-- ARGV[1] -> purchase id
-- ARGV[2] -> "confirmed", "awaiting_payment" or "released"
-- ARGV[3] -> order id ("" when released)
-- ARGV[4] -> now, unix ms
-- ARGV[5] -> user id
-- ARGV[6] -> quantity
-- ARGV[7] -> created, unix ms
-- ARGV[8] -> this shard's number
-- ARGV[9] -> pay by, unix ms ("" unless awaiting_payment)
-- ARGV[10] -> the expiry job ("" unless awaiting_payment)
-- ARGV[11] -> the event job ("" for none)
-- ARGV[12] -> when the expiry job is due, unix ms ("" unless awaiting_payment)
--
-- Returns {code, record}: 0 no such purchase (the item was re-preheated);
-- 1 done now; 2 it had ended already (record as it stands).
local rec = redis.call('HGET', KEYS[2], ARGV[1])
local status, qty, created, updated, home, requeues, order, user
if rec then
  status, qty, created, updated, home, requeues, order, user =
    string.match(rec, '^([%a_]+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
  if status ~= 'reserved' then
    return {2, rec}
  end
else
  local entry = redis.call('HGET', KEYS[3], ARGV[5])
  -- Listed on this shard with this quantity, and not released ("!"): a
  -- released purchase has its record.
  if not entry or not string.find(',' .. string.match(entry, '|(.*)$') .. ',',
      ',' .. ARGV[1] .. '@' .. ARGV[8] .. ':' .. ARGV[6] .. ',', 1, true) then
    return {0, ''}
  end
  qty, created, home, requeues, user = ARGV[6], ARGV[7], ARGV[8], '0', ARGV[5]
end
local order = ARGV[3]
if ARGV[2] == 'awaiting_payment' then
  order = order .. '@' .. ARGV[9]
end
local out = ARGV[2] .. '|' .. qty .. '|' .. created .. '|' .. ARGV[4] .. '|' .. home .. '|' .. requeues .. '|' .. order .. '|' .. user
redis.call('HSET', KEYS[2], ARGV[1], out)
if ARGV[11] ~= '' then
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[11])
end
if ARGV[2] == 'confirmed' then
  redis.call('HINCRBY', KEYS[1], 'confirmed', qty)
elseif ARGV[2] == 'awaiting_payment' then
  redis.call('HINCRBY', KEYS[1], 'awaiting', qty)
  redis.call('ZADD', KEYS[4], ARGV[12], ARGV[10])
else
  local version = redis.call('HGET', KEYS[1], 'version')
  if version then
    redis.call('HINCRBY', KEYS[1], 'left:' .. version, qty)
    redis.call('HINCRBY', KEYS[1], 'released', qty)
  end
end
return {1, out}
