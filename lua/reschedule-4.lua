--[[ reschedule: move a waiting job to a new due time, or give it a new priority level, or both.

KEYS[1] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] ctl      hash    the partition's flags (read: sealed by a resize)
KEYS[4] moving   hash    the batch a resize has taken out of this partition

ARGV[1] job id
ARGV[2] 'at' (ARGV[3] is an absolute ms time), 'in' (ARGV[3] is a      one of in|keep|at
        delay in ms from Redis now) or 'keep' (the due time stays)
ARGV[3] ms value                                                       number -1e15..1e15
ARGV[4] past tolerance ms                                              number 0..1e13 as tolerance
ARGV[5] horizon ms                                                     number 1..1e13 as horizon
ARGV[6] due-hint channel (sharded pub/sub) to wake the dispatcher when the head moves earlier
ARGV[7] new priority level (lua/includes/lanes.lua), or '' to keep it  one of h|n|l|''

Returns
  {1, due ms}             rescheduled
  {-2, at, now, tol}      E_DUE_IN_PAST
  {-3, due, now, horizon} E_BEYOND_HORIZON
  {-5, id}                E_NOT_SCHEDULED: already promoted to the ready stream
  {-6, id}                E_JOB_NOT_FOUND
  {-7, id}                E_JOB_RUNNING
  {-9, id}                E_JOB_DEAD
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED: not here, and a resize sealed this
                                      partition (lua/includes/resize.lua): ask that generation
  {-17, id}                           E_JOB_MOVING: a resize is moving it: ask again shortly

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include schedule.lua
--@include checks.lua
--@include lanes.lua
--@include compact.lua
--@include resize.lua

local level = ARGV[7] or ''
local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash'})
if wrong then return wrong end
local now = now_ms()
local id = ARGV[1]
local current = redis.call('ZSCORE', KEYS[1], id)
local member, body
if not current then
  member, current = compact_find(KEYS[1], id)
  if member then body = select(2, split_member(member)) end
end
local due, rejected
if ARGV[2] == 'keep' then
  -- The score as it is (even one written by hand, +-inf), replied as whole ms.
  due = current and score_ms(current)
else
  due, rejected = due_time(ARGV[2], ARGV[3], now, tolerance, horizon)
  if rejected then return rejected end
end
if not current then
  local v = redis.call('HGET', KEYS[2], id)
  if not v then return not_here(KEYS[3], KEYS[4], id) end
  local state = string.sub(v, 1, 1)
  if state == 'A' then return {-7, id} end
  if state == 'D' then return {-9, id} end
  return {-5, id}
end
-- A compact job takes the plain layout: its id no longer tells its due time.
if member then expand_compact(KEYS[2], KEYS[1], id, member, current, body) end
redis.call('ZADD', KEYS[1], 'XX', ARGV[2] == 'keep' and current or due, id)
-- A start a rate limit reserved (state L) is for the old time: at the new one, ask again.
local v = redis.call('HGET', KEYS[2], id)
if v then
  local nv = v
  if ARGV[2] ~= 'keep' and string.sub(nv, 1, 1) == 'L' then nv = 'S' .. string.sub(nv, 2) end
  if level ~= '' then nv = with_level(nv, level) end
  if nv ~= v then redis.call('HSET', KEYS[2], id, nv) end
end
if redis.call('ZRANGE', KEYS[1], 0, 0)[1] == id then
  redis.call('SPUBLISH', ARGV[6], due)
end
return {1, due}
