--[[ resize-put: store records a resize took out of a partition of the generation it empties
(lua/resize-take-10.lua) in one partition of the new generation.

Each record goes where it was: a waiting job into the due set (a compact member as it was, a
plain one with its envelope and last error; a due-now job from a lane waits due now), a
schedule with its next tick and state (unless this partition already has one of that name:
written since the resize began, it is the newer), a dead letter into the dead stream with its
envelope.  The batch id goes into 'inbound', so a put sent again (a resumed resize) stores
nothing twice.  A job id already here is left as it is.

KEYS[1] due      zset    job id (or '<id> <body>') scored by due ms
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] inbound  set     batch ids stored here
KEYS[5] dead     stream  dead letters
KEYS[6] sched    hash    schedule name -> definition JSON
KEYS[7] sched:next zset  schedule name scored by next tick
KEYS[8] sched:state hash schedule name -> state
KEYS[9] stats    hash    counters ('moved_in')

ARGV[1] batch id
ARGV[2] due-hint channel (sharded pub/sub): wakes the dispatcher when the head moved earlier
ARGV[3..] records (JSON, as resize-take returns them)
Max ARGV: 1002  = 2 + one per record: a batch holds at most 1000

Returns {1, stored} or {0, 0} when this batch was stored here before
]]
--@include checks.lua
--@include compact.lua

local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'set',
  KEYS[5], 'stream', KEYS[6], 'hash', KEYS[7], 'zset', KEYS[8], 'hash'})
if wrong then return wrong end
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return {0, 0} end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local earliest = head[2] and tonumber(head[2]) or math.huge
local stored = 0
for i = 3, #ARGV do
  local r = cjson.decode(ARGV[i])
  if r.k == 'j' then
    local due = tonumber(r.s)
    if r.m then
      if redis.call('ZADD', KEYS[1], 'NX', due, r.m) == 1 then stored = stored + 1 end
    elseif r.e and redis.call('HSETNX', KEYS[2], r.i, r.e) == 1 then
      redis.call('ZADD', KEYS[1], due, r.i)
      if r.r then redis.call('HSET', KEYS[3], r.i, r.r) end
      stored = stored + 1
    end
    if due < earliest then earliest = due end
  elseif r.k == 's' then
    if redis.call('HSETNX', KEYS[6], r.i, r.d) == 1 then
      if r.x then redis.call('ZADD', KEYS[7], tonumber(r.x), r.i) end
      if r.st then redis.call('HSET', KEYS[8], r.i, r.st) end
      stored = stored + 1
    end
  elseif r.k == 'x' then
    redis.call('XADD', KEYS[5], '*', unpack(r.f))
    if r.e then
      redis.call('HSETNX', KEYS[2], r.i, r.e)
      if r.r then redis.call('HSET', KEYS[3], r.i, r.r) end
    end
    stored = stored + 1
  end
end
redis.call('SADD', KEYS[4], ARGV[1])
count(KEYS[9], 'moved_in', stored)
if earliest < math.huge and (not head[2] or earliest < tonumber(head[2])) then
  redis.call('SPUBLISH', ARGV[2], string.format('%d', earliest))
end
return {1, stored}
