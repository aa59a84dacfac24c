--[[ schedule-put: add, update, pause, resume or remove one periodic schedule of a partition.

The client validates the definition and computes its next tick from the Redis clock first
(shardq.schedules); this script stores it atomically.  An update keeps the schedule's state
(fires, misfires, paused).  A paused schedule has no entry in the next-tick set, so the
dispatcher's fire step never sees it.

KEYS[1] schedules  hash    schedule name -> definition JSON
KEYS[2] next       zset    active schedule name scored by next tick ms
KEYS[3] state      hash    schedule name -> 'last fire|last tick|fires|misfires|paused'

ARGV[1] what to do                                                    one of put|pause|resume|remove
ARGV[2] schedule name
ARGV[3] put: the definition JSON; resume: the sha1 of the definition the next tick was
        computed from ('' for any); else unused
ARGV[4] next tick ms (put, resume), -1 when the schedule has no tick  number -1..1e15 as next_ms
        left
ARGV[5] due-hint channel (sharded pub/sub): wakes the dispatcher when the head moves earlier

Returns
  {1, created 1/0, paused 1/0, now ms}   done (remove: created = 1 when it existed)
  {-12, name}                            E_SCHEDULE_NOT_FOUND (pause, resume)
  {-13, name}                            E_SCHEDULE_CHANGED: updated since it was read (resume)
]]
--@include now.lua
--@include checks.lua
--@include periodic.lua

local action = ARGV[1]
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
if wrong then return wrong end
local name = ARGV[2]
local now = now_ms()
local def = redis.call('HGET', KEYS[1], name)

if action == 'remove' then
  if not def then return {1, 0, 0, now} end
  redis.call('HDEL', KEYS[1], name)
  redis.call('HDEL', KEYS[3], name)
  redis.call('ZREM', KEYS[2], name)
  return {1, 1, 0, now}
end
if action ~= 'put' and not def then return {-12, name} end
if action == 'resume' and ARGV[3] ~= '' and redis.sha1hex(def) ~= ARGV[3] then
  return {-13, name}
end

local state = sched_state(redis.call('HGET', KEYS[3], name))
if action == 'put' then
  redis.call('HSET', KEYS[1], name, ARGV[3])
elseif action == 'pause' then
  state[5] = 1
else
  state[5] = 0
end
redis.call('HSET', KEYS[3], name, sched_state_text(state))
if state[5] == 1 or next_ms < 0 then
  redis.call('ZREM', KEYS[2], name)
else
  local head = head_ms(KEYS[2])
  redis.call('ZADD', KEYS[2], next_ms, name)
  if head < 0 or next_ms < head then redis.call('SPUBLISH', ARGV[5], next_ms) end
end
local created = 0
if not def then created = 1 end
return {1, created, state[5], now}
