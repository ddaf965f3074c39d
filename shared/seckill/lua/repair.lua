-- repair: follow up a purchase still reserved ARGV[4] after its admission
-- or its last re-enqueue. If its order job is scheduled or leased, it is on
-- its way: nothing to do. Otherwise the job was lost, given up on (dead), or
-- handed over to SQS, which Redis cannot tell apart: enqueue it again, at
-- most ARGV[3] times, each a timeout after the last; after that answer 2 and
-- change nothing. The caller then gives up on the order in the order ledger
-- (it voids the order id, so a delivery still on its way can no longer make
-- it) before it releases the purchase, or confirms it if the order exists.
-- This script never releases: "the job is not in Redis" proves no loss.
--
-- A purchase made on its buyer's home shard has no record while reserved
-- (see settle_order.lua): the buyer's entry there lists it, and ARGV[5..8]
-- say what its order job says of it.
--
-- Run twice with the same ARGV (a lost reply that the client retries), it
-- finds the job it enqueued scheduled and does nothing, or answers 2 again.
--
-- KEYS[1] -> purchases
-- KEYS[2] -> order queue due set
-- KEYS[3] -> order queue inflight set
-- KEYS[4] -> order queue dead set
-- KEYS[5] -> buyers of this shard
-- ARGV[1] -> purchase id
-- ARGV[2] -> now, unix ms
-- ARGV[3] -> most re-enqueues
-- ARGV[4] -> last changed before this (unix ms) counts as overdue
-- ARGV[5] -> user id
-- ARGV[6] -> quantity
-- ARGV[7] -> created, unix ms
-- ARGV[8] -> this shard's number
-- ARGV[9] -> the order job
--
-- Returns {code, record}: 0 nothing to do; 1 re-enqueued; 2 give up.
local rec = redis.call('HGET', KEYS[1], ARGV[1])
local status, qty, created, updated, home, requeues, order, user
if rec then
  status, qty, created, updated, home, requeues, order, user =
    string.match(rec, '^([%a_]+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
else
  local entry = redis.call('HGET', KEYS[5], ARGV[5])
  if not entry or not string.find(',' .. string.match(entry, '|(.*)$') .. ',',
      ',' .. ARGV[1] .. '@' .. ARGV[8] .. ':' .. ARGV[6] .. ',', 1, true) then
    return {0, ''}
  end
  status, qty, created, updated, home, requeues, order, user = 'reserved', ARGV[6], ARGV[7], ARGV[7], ARGV[8], '0', '', ARGV[5]
  rec = ''
end
if status ~= 'reserved' or tonumber(updated) >= tonumber(ARGV[4]) then
  return {0, rec}
end
if redis.call('ZSCORE', KEYS[2], ARGV[9]) or redis.call('ZSCORE', KEYS[3], ARGV[9]) then
  return {0, rec}
end
redis.call('ZREM', KEYS[4], ARGV[9])
if tonumber(requeues) < tonumber(ARGV[3]) then
  local out = 'reserved|' .. qty .. '|' .. created .. '|' .. ARGV[2] .. '|' .. home .. '|' .. (tonumber(requeues) + 1) .. '|' .. order .. '|' .. user
  redis.call('HSET', KEYS[1], ARGV[1], out)
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[9])
  return {1, out}
end
return {2, rec}
