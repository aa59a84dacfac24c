--[[ limit-release: give back the running slots of jobs whose handlers ended.

KEYS[1] holders  zset    job id scored by hold expiry ms

ARGV[1..] job ids                       at least 1
Max ARGV: 1000  = at most 1000 jobs (shardq.worker.limiter.MAX_TAKE)

Returns
  {released}                          how many were held

Flags: allow-oom  (it frees memory)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'zset'})
if wrong then return wrong end
return {redis.call('ZREM', KEYS[1], unpack(ARGV))}
