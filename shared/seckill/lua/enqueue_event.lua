-- enqueue_event: queue an order event job on an item shard's order queue,
-- unless the shard is retired (no longer polled; see retire.lua) or holds
-- nothing at all: then the caller queues it on the always-polled events
-- queue instead. Checked and queued in one step, so an event never lands in
-- a queue just taken out of polling.
--
-- KEYS[1] -> item shard meta
-- KEYS[2] -> order queue due set
-- ARGV[1] -> due, unix ms
-- ARGV[2] -> the event job
--
-- Returns 1 queued (or queued already), 0 refused (nothing changed).
if redis.call('HEXISTS', KEYS[1], 'retired') == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[2], 'NX', ARGV[1], ARGV[2])
return 1
