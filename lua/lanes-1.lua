--[[ lanes: turn a partition's lanes (priorities and fair sharing, lua/includes/lanes.lua) on or
off.  With them on, enqueue and promote put due jobs in the lane instead of the ready stream;
with them off, they append to the stream again.  Turned off, the flag reads '2' (draining)
until fetch finds the lane empty and drops it: jobs already in the lane are still delivered.

The flag is the 'lanes' field of the partition's stats hash, which enqueue, promote and fetch
already read (KEYS of their own), so it costs their calls no extra key, and a partition without
lanes never touches its lane keys.

KEYS[1] stats    hash    counters (and the 'lanes' flag)

ARGV[1] '1' to turn lanes on, '0' to turn them off

Returns {1 when the state changed, else 0}
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (an operator step that writes one field; a full Redis must stay steerable)
]]
--@include checks.lua

if ARGV[1] ~= '1' and ARGV[1] ~= '0' then return {-11, 1, ARGV[1], '0', '1'} end
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local was = redis.call('HGET', KEYS[1], 'lanes') == '1'
if ARGV[1] == '1' then
  if was then return {0} end
  redis.call('HSET', KEYS[1], 'lanes', '1')
  return {1}
end
if not was then return {0} end
redis.call('HSET', KEYS[1], 'lanes', '2')
return {1}
