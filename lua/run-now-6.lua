--[[ run-now: make a scheduled or dead job due now.

A scheduled job keeps its attempts and is moved to the head of the due set; a dead job gets
attempt 0 and its error cleared (its dead letter stays in the dead stream until trimmed or
purged; listings show it as no longer dead).  Either way the dispatcher is woken.  The
operator's (and admin's) only (lua/includes/checks.lua operator_only).

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters
KEYS[5] ctl      hash    the partition's flags (its type is checked: who may write it may run this;
                         read: sealed by a resize)
KEYS[6] moving   hash    the batch a resize has taken out of this partition

ARGV[1] job id
ARGV[2] due-hint channel (sharded pub/sub)

Returns
  {1, 'scheduled'}   was scheduled, now due
  {1, 'dead'}        was dead, now due again with attempt 0
  {0, 'ready'}       already promoted: a worker takes it as soon as it can
  {-6, id}     E_JOB_NOT_FOUND
  {-7, id}     E_JOB_RUNNING: a worker holds it
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED: not here, and a resize sealed this
                                      partition (lua/includes/resize.lua): ask that generation
  {-17, id}                           E_JOB_MOVING: a resize is moving it: ask again shortly
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua
--@include compact.lua
--@include resize.lua

local denied = operator_only(KEYS[5], KEYS[1])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[5], 'hash',
  KEYS[6], 'hash'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  local member, due = compact_find(KEYS[2], ARGV[1])
  if not member then return not_here(KEYS[5], KEYS[6], ARGV[1]) end
  local _, body = split_member(member)
  expand_compact(KEYS[1], KEYS[2], ARGV[1], member, due, body)
  v = 'S0|' .. body
end
local state, attempt, body = split_envelope(v)
if not state then return {-6, ARGV[1]} end
if state == 'A' then return {-7, ARGV[1]} end
local now = now_ms()
if state == 'D' then
  redis.call('HSET', KEYS[1], ARGV[1], 'S0|' .. body)
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  count(KEYS[4], 'replayed', 1)
  redis.call('SPUBLISH', ARGV[2], '1')
  return {1, 'dead'}
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {0, 'ready'} end
redis.call('ZADD', KEYS[2], 'XX', now, ARGV[1])
redis.call('SPUBLISH', ARGV[2], '1')
return {1, 'scheduled'}
