--[[ pause: pause or resume one partition: while paused nothing is promoted, fetched or
reclaimed (jobs keep their due times and deliveries); on resume the partition's dispatcher and
workers are woken at once.

The flag is the 'paused' field of the partition's stats hash, which promote, fetch and reclaim
already read (KEYS of their own), so pausing needs no extra key in their calls.

KEYS[1] stats    hash    counters (and the 'paused' flag)

ARGV[1] '1' to pause, '0' to resume
ARGV[2] due-hint channel (sharded pub/sub): wakes the dispatcher on resume
ARGV[3] ready-hint channel (sharded pub/sub): wakes the workers on resume

Returns {1 when the state changed, else 0}
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (pausing is an emergency step that must work on a full Redis; it writes one field)
]]
--@include checks.lua

if ARGV[1] ~= '1' and ARGV[1] ~= '0' then return {-11, 1, ARGV[1], '0', '1'} end
-- Unlike the counters, the flag is not advisory: a stats key of another type is refused.
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local was = redis.call('HGET', KEYS[1], 'paused') == '1'
if ARGV[1] == '1' then
  if was then return {0} end
  redis.call('HSET', KEYS[1], 'paused', '1')
  return {1}
end
if not was then return {0} end
redis.call('HDEL', KEYS[1], 'paused')
redis.call('SPUBLISH', ARGV[2], '1')
redis.call('SPUBLISH', ARGV[3], '1')
return {1}
