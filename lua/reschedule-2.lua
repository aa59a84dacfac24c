--[[ reschedule: move a waiting job to a new due time.

KEYS[1] due      zset    job id scored by due ms
KEYS[2] jobs     hash    job id -> envelope

ARGV[1] job id
ARGV[2] 'at' (ARGV[3] is an absolute ms time) or 'in' (ARGV[3] is a delay in ms from Redis now)
ARGV[3] ms value
ARGV[4] past tolerance ms
ARGV[5] horizon ms
ARGV[6] due-hint channel (sharded pub/sub) to wake the dispatcher when the head moves earlier

Returns
  {1, due ms}             rescheduled
  {-2, at, now, tol}      E_DUE_IN_PAST
  {-3, due, now, horizon} E_BEYOND_HORIZON
  {-5, id}                E_NOT_SCHEDULED: already promoted to the ready stream
  {-6, id}                E_JOB_NOT_FOUND
  {-7, id}                E_JOB_RUNNING
  {-9, id}                E_JOB_DEAD

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include schedule.lua

local now = now_ms()
local due, rejected = due_time(ARGV[2], ARGV[3], now, tonumber(ARGV[4]), tonumber(ARGV[5]))
if rejected then return rejected end
local id = ARGV[1]
if not redis.call('ZSCORE', KEYS[1], id) then
  local v = redis.call('HGET', KEYS[2], id)
  if not v then return {-6, id} end
  local state = string.sub(v, 1, 1)
  if state == 'A' then return {-7, id} end
  if state == 'D' then return {-9, id} end
  return {-5, id}
end
redis.call('ZADD', KEYS[1], 'XX', due, id)
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
  redis.call('SPUBLISH', ARGV[6], due)
end
return {1, due}
