--[[ empty-due: delete up to ARGV[1] scheduled jobs of a partition, earliest first.

Bounded: one ZRANGE, one ZREMRANGEBYRANK and HDELs of at most ARGV[1] jobs; called again
until it returns 0.  Only jobs waiting in the due set are touched (none has started).  The
operator's (and admin's) only (lua/includes/checks.lua operator_only).

KEYS[1] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] ctl      hash    the partition's flags (its type is checked: who may write it may run this)

ARGV[1] most jobs to delete             number 1..1000 as n

Returns {jobs deleted}
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash
Flags: allow-oom  (frees memory)
]]
--@include checks.lua
--@include compact.lua

local denied = operator_only(KEYS[4], KEYS[1])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash'})
if wrong then return wrong end
local ids = redis.call('ZRANGE', KEYS[1], 0, n - 1)
if #ids == 0 then return {0} end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1)
for i = 1, #ids do ids[i] = split_member(ids[i]) end
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[3], unpack(ids))
return {#ids}
