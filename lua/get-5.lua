--[[ get: a consistent snapshot of one job.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error
KEYS[4] ctl      hash    the partition's flags (read: sealed by a resize)
KEYS[5] moving   hash    the batch a resize has taken out of this partition (job id -> record)

ARGV[1] job id

Returns {envelope or nil, due ms or nil, last error or nil} (a compact job's envelope is
'S0|<body>', as promote will write it).  The due time is the score as Redis keeps it, text
('inf' or '1.5' when written by hand): the reader checks it and shows a bad one as malformed
(shardq.store.numbers), rather than this reply turning it into a time it is not.

A job not here in a partition a resize sealed: its record in 'moving' as above, or
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED: not here, and a resize sealed this
                                      partition (lua/includes/resize.lua): ask that generation
  {-17, id}                           E_JOB_MOVING: a resize is moving it: ask again shortly
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Flags: no-writes  (reads only)
]]
--@include checks.lua
--@include compact.lua
--@include resize.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash',
  KEYS[5], 'hash'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  local member, due = compact_find(KEYS[2], ARGV[1])
  if not member then
    local record = redis.call('HGET', KEYS[5], ARGV[1])
    if record then
      local r = cjson.decode(record)
      if r.m then return {'S0|' .. select(2, split_member(r.m)), tostring(r.s), false} end
      return {r.e, r.k == 'j' and tostring(r.s) or false, r.r or false}
    end
    local to = sealed_to(KEYS[4])
    if to then return {-16, to, ARGV[1]} end
    return {false, false, false}
  end
  local _, body = split_member(member)
  return {'S0|' .. body, due, false}
end
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
return {v, due or false, redis.call('HGET', KEYS[3], ARGV[1])}
