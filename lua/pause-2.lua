--[[ pause: pause or resume one partition: while paused nothing is promoted, fetched or
reclaimed (jobs keep their due times and deliveries); on resume the partition's dispatcher and
workers are woken at once.  The operator's (and admin's) only.

The flag is the 'paused' field of the partition's control hash, which promote, fetch and
reclaim already read (KEYS of their own) and which only the operator and admin roles may write
(lua/includes/lanes.lua); a partition of a queue created before the control hash (layout < 4,
not yet upgraded) keeps it in its stats hash, where its readers look.

KEYS[1] ctl      hash    the partition's flags
KEYS[2] stats    hash    counters (and the flags of a queue of layout < 4)

ARGV[1] '1' to pause, '0' to resume     flag
ARGV[2] due-hint channel (sharded pub/sub): wakes the dispatcher on resume
ARGV[3] ready-hint channel (sharded pub/sub): wakes the workers on resume

Returns {1 when the state changed, else 0}
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash

Flags: allow-oom  (pausing is an emergency step that must work on a full Redis; it writes one field)
]]
--@include checks.lua
--@include lanes.lua

local denied = operator_only(KEYS[1], KEYS[2])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local flags = flags_key(KEYS[1], KEYS[2])
-- Unlike the counters, the flag is not advisory: a stats key of another type is refused.
wrong = wrong_type({flags, 'hash'})
if wrong then return wrong end
local was = redis.call('HGET', flags, 'paused') == '1'
if ARGV[1] == '1' then
  if was then return {0} end
  redis.call('HSET', flags, 'paused', '1')
  return {1}
end
if not was then return {0} end
redis.call('HDEL', flags, 'paused')
redis.call('SPUBLISH', ARGV[2], '1')
redis.call('SPUBLISH', ARGV[3], '1')
return {1}
