--[[ get: a consistent snapshot of one job.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error

ARGV[1] job id

Returns {envelope or nil, due ms or nil, last error or nil} (a compact job's envelope is
'S0|<body>', as promote will write it).  The due time is the score as Redis keeps it, text
('inf' or '1.5' when written by hand): the reader checks it and shows a bad one as malformed
(shardq.store.numbers), rather than this reply turning it into a time it is not.

  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Flags: no-writes  (reads only)
]]
--@include checks.lua
--@include compact.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  local member, due = compact_find(KEYS[2], ARGV[1])
  if not member then return {false, false, false} end
  local _, body = split_member(member)
  return {'S0|' .. body, due, false}
end
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
return {v, due or false, redis.call('HGET', KEYS[3], ARGV[1])}
