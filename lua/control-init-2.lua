--[[ control-init: start using a partition's control hash, moving the flags a queue created
before it (layout < 4) kept in the stats hash.  The operator's (and admin's) only.

`shardq queue create` runs it on every partition of a new queue, `shardq queue upgrade` on
every partition of an existing one: from then on the partition's flags ('paused', 'lanes') are
read and written only in its control hash, which no producer, dispatcher or worker may write,
and whatever anyone writes into the stats hash under those names is ignored (see
lua/includes/lanes.lua).  Safe to repeat: a partition already using it is left alone.

KEYS[1] ctl      hash    the partition's flags; its field 'lanes' marks it in use
KEYS[2] stats    hash    counters (and the flags of a queue of layout < 4)

Returns {1} when it started using the control hash now, {0} when it already did
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash

Flags: allow-oom  (an operator step that writes a few fields; a full Redis must stay steerable)
]]
--@include checks.lua
--@include lanes.lua

local denied = operator_only(KEYS[1], KEYS[2])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
if redis.call('HEXISTS', KEYS[1], 'lanes') == 1 then return {0} end
-- The flags as this partition's readers see them now (a stats key of the wrong type has none).
local paused, lanes = partition_flags(KEYS[1], KEYS[2])
local fields = {'lanes', lanes or '0'}
if paused then
  fields[#fields + 1] = 'paused'
  fields[#fields + 1] = '1'
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.pcall('HDEL', KEYS[2], 'paused', 'lanes')
return {1}
