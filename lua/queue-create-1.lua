--[[ queue-create: record a queue's partition count once; later calls must agree with it.

KEYS[1] meta     hash    partitions, layout, created_ms (a resized queue: its count in
                         'generation:partitions', shardq.store.meta.RESIZED_MARKER in
                         'partitions', which refuses every release before resizing)

ARGV[1] partition count (one per slot at most)                           number 1..16384
ARGV[2] key layout version
ARGV[3] retention of acknowledged ready entries, ms (0: delete at once)  number 0..604800000
ARGV[4] dead-letter cap per partition (entries)                          number 1..1e12

Returns
  {1, partitions}            created
  {0, partitions}            already existed with the same count
  {-8, existing, requested}  E_QUEUE_CONFLICT
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local existing = redis.call('HGET', KEYS[1], 'generation:partitions')
  or redis.call('HGET', KEYS[1], 'partitions')
if existing then
  if existing ~= ARGV[1] then return {-8, existing, ARGV[1]} end
  return {0, existing}
end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1], 'layout', ARGV[2], 'created_ms', now_ms(),
  'ack_retention_ms', ARGV[3], 'dead_cap', ARGV[4])
return {1, ARGV[1]}
