--[[ cancel: remove a job that has not started, or (ARGV[2] = '1') stop one that is running.

A job still in the due set is removed outright.  A job already promoted but not yet fetched has
its envelope removed, so the worker that reads its ready entry (or lane job) drops it without
running it, and is counted in the partition's stats field 'voided': partition-stats subtracts
those from the ready figure, fetch lowers the count as it drops them (lua/fetch-9.lua).  The
entry itself stays: this call does not know its id (a job is found by id, the stream by entry
id), and an XDEL of an entry no worker has read makes Redis 7.0 report the group's lag as
unknown until the group reads to the end of the stream, so the ready figure would be a guess;
a lane job's member is '<due> <flow> <id>', not found by id either.

A running job has its envelope removed too, so it can end only as cancelled: the worker holding
it is told at once (ARGV[3]: 'cancel:<id>' on the partition's ready-hint channel, which every
worker reading the partition listens to) and again by its next heartbeat (the partition's
cancels set is not empty: lua/touch-3.lua); either way the worker stops the job only once it
has read that the envelope is gone (anyone may publish on the channel, a producer may write the
set).  Its settle finds no envelope and counts nothing more; a worker that dies meanwhile leaves
a delivery whose job is gone, which the reclaim drops unrun.  The cancels set is only that
hint, and kept bounded here: members scored after now (no cancel wrote them), those older than
a day, and all but the newest CANCELS_KEPT go.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters; 'voided': promoted jobs cancelled whose entries wait unread
KEYS[5] ctl      hash    the partition's flags (read: sealed by a resize)
KEYS[6] moving   hash    the batch a resize has taken out of this partition
KEYS[7] cancels  zset    running jobs cancelled, by cancel time (ms, Redis clock)

ARGV[1] job id
ARGV[2] '1': a running job is cancelled too; '0': it is refused (E_JOB_RUNNING)
ARGV[3] the partition's ready-hint channel (sharded pub/sub): the worker holding it is told

Returns
  {1, 1}       cancelled while waiting in the due set
  {1, 0}       cancelled after promotion, before any worker started it (counted 'voided')
  {1, 2}       cancelled while running (ARGV[2] = '1'): its worker is told to stop it
  {-6, id}     E_JOB_NOT_FOUND
  {-7, id}     E_JOB_RUNNING: a worker holds it (ARGV[2] = '0')
  {-9, id}     E_JOB_DEAD: it is in the dead-letter stream
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED: not here, and a resize sealed this
                                      partition (lua/includes/resize.lua): ask that generation
  {-17, id}                           E_JOB_MOVING: a resize is moving it: ask again shortly

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua
--@include compact.lua
--@include resize.lua

-- Running cancels the cancels set keeps at most (newest first): the heartbeats only ask
-- whether it is empty, so this bounds what a producer writing it by hand can make it hold.
local CANCELS_KEPT = 1000

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[5], 'hash',
  KEYS[6], 'hash', KEYS[7], 'zset'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  local member = compact_find(KEYS[2], ARGV[1])
  if not member then return not_here(KEYS[5], KEYS[6], ARGV[1]) end
  redis.call('ZREM', KEYS[2], member)
  count(KEYS[4], 'cancelled', 1)
  return {1, 1}
end
local state = string.sub(v, 1, 1)
if state == 'A' then
  if ARGV[2] ~= '1' then return {-7, ARGV[1]} end
  local now = now_ms()
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '(' .. string.format('%d', now), '+inf')
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - 86400000)
  redis.call('ZADD', KEYS[7], now, ARGV[1])
  -- (pcall: a producer user from an ACL file older than this right still cancels)
  redis.pcall('ZREMRANGEBYRANK', KEYS[7], 0, -(CANCELS_KEPT + 1))
  count(KEYS[4], 'cancelled', 1)
  redis.call('SPUBLISH', ARGV[3], 'cancel:' .. ARGV[1])
  return {1, 2}
end
if state == 'D' then return {-9, ARGV[1]} end
local was_due = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
count(KEYS[4], 'cancelled', 1)
-- Not in the due set: promoted, its entry waits in the ready stream or the lane.
if was_due == 0 then count(KEYS[4], 'voided', 1) end
return {1, was_due}
