--[[ queue-create: record a queue's partition count once; later calls must agree with it.

KEYS[1] meta     hash    partitions, layout, created_ms (a resized queue: its count in
                         'generation:partitions', shardq.store.meta.RESIZED_MARKER in
                         'partitions', which refuses every release before resizing)

ARGV[1] partition count (1..16384: one per slot at most)
ARGV[2] key layout version
ARGV[3] retention of acknowledged ready entries, ms (0: delete at once)
ARGV[4] dead-letter cap per partition (entries)

Returns
  {1, partitions}            created
  {0, partitions}            already existed with the same count
  {-8, existing, requested}  E_QUEUE_CONFLICT
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.
]]
--@include now.lua
--@include checks.lua

local _, bad1 = arg_number(1, 1, 16384)
if bad1 then return bad1 end
local _, bad3 = arg_number(3, 0, 604800000)
if bad3 then return bad3 end
local _, bad4 = arg_number(4, 1, 1e12)
if bad4 then return bad4 end
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
