--[[ limit-release: give back the running slots of jobs whose handlers ended.

KEYS[1] holders  zset    job id scored by hold expiry ms

ARGV[1..] job ids (1 .. 1000 of them)
Max ARGV: 1000  = at most 1000 jobs (shardq.worker.limiter.MAX_TAKE)

Returns
  {released}                          how many were held
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (it frees memory)
]]
--@include checks.lua

if #ARGV < 1 or #ARGV > 1000 then return {-11, 1, #ARGV, 1, 1000} end
local wrong = wrong_type({KEYS[1], 'zset'})
if wrong then return wrong end
return {redis.call('ZREM', KEYS[1], unpack(ARGV))}
