--[[ resize-seal: seal a partition a resize empties, or unseal it (an abort that moves its
jobs back).  The admin's and operator's only: it writes the control hash.

A sealed partition takes no new job and points by-id calls that miss at the generation named
(lua/includes/resize.lua).  Safe to repeat.

KEYS[1] ctl      hash    the partition's flags; 'sealed' = '<generation>:<partitions>'
KEYS[2] stats    hash    counters (its type is checked with ctl's: who may write one)

ARGV[1] '<generation>:<partitions>' the jobs move to, or '' to unseal

Returns {1} (sealed or unsealed now, or already)
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash

Flags: allow-oom  (an operator step that writes one field; a full Redis must stay steerable)
]]
--@include checks.lua

local denied = operator_only(KEYS[1], KEYS[2])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local to = ARGV[1]
if to == '' then
  redis.call('HDEL', KEYS[1], 'sealed')
  return {1}
end
-- A pattern, not a bound: checked here.
if not string.match(to, '^%d+:%d+$') then return {-11, 1, to, 'generation', 'partitions'} end
redis.call('HSET', KEYS[1], 'sealed', to)
return {1}
