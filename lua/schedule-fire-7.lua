--[[ schedule-fire: enqueue the due ticks of periodic schedules and advance their next tick.

Fenced like promote: only the dispatcher holding the partition's lease fires.  The caller read
the due schedules (schedule-read 'due'), computed each one's ticks and next tick from its cron
expression or interval (calendar arithmetic in Python) and its misfire policy, and sends them
here.  Per schedule, atomically: its stored next tick and definition must still be the ones
read (else it was updated, paused, removed or fired meanwhile: nothing is written for it);
each tick's job is stored as enqueue stores a job that is due now, under the id
'sq-sched:<name>@<tick ms>' (an existing id is left alone), then the next tick is stored and
the state counters updated.  A resent call finds the next tick moved and writes nothing.
Every tick must be at or before the Redis clock: the schedule is left alone otherwise.

KEYS[1] schedules  hash    schedule name -> definition JSON
KEYS[2] next       zset    active schedule name scored by next tick ms
KEYS[3] state      hash    schedule name -> 'last fire|last tick|fires|misfires|paused'
KEYS[4] jobs       hash    job id -> envelope
KEYS[5] ready      stream  due jobs
KEYS[6] lease      string  '<token>:<owner>' of the partition's dispatcher
KEYS[7] stats      hash    counters

ARGV[1] fencing token of the caller
ARGV[2] ready-hint channel (sharded pub/sub) to wake workers when jobs were enqueued
ARGV[3..] per schedule: name, next tick read (ms), sha1 of the definition read ('' when it
        had none), new next tick ms (-1: none left), misfires to count, job body (JSON),
        n, then n tick times in ms (increasing, >= the tick read, < the new next tick)
Max ARGV: 2402  = 2 + 7 per schedule + its ticks: 200 schedules and 1000 ticks (shardq.store.schedules.FIRE_GROUPS, FIRE_TICKS)

Returns
  {now ms, earliest next tick ms or -1, then 2 per schedule: status, jobs created}
     status 1 fired, 0 stale (changed meanwhile: nothing written), 2 a tick is after now
  {-1, token, lease}                  E_FENCED: the caller's token is not current
]]
--@include now.lua
--@include lease.lua
--@include checks.lua
--@include periodic.lua

-- Validate every group before any write.  Here, not by the header's checks: a group's length
-- depends on its n, and a tick's bounds on the values before it.
local groups = {}
local i, total = 3, 0
while i <= #ARGV do
  if i + 6 > #ARGV then return {-11, i, 'argument count', 7, 7} end
  local g = {name = ARGV[i], sha = ARGV[i + 2], body = ARGV[i + 5], ticks = {}}
  local bad
  g.expected, bad = arg_number(i + 1, 0, 1e15)
  if bad then return bad end
  g.next_ms, bad = arg_number(i + 3, -1, 1e15)
  if bad then return bad end
  if g.next_ms >= 0 and g.next_ms <= g.expected then
    return {-11, i + 3, ARGV[i + 3], tostring(g.expected + 1), '1e15'}
  end
  g.misfires, bad = arg_number(i + 4, 0, 1e12)
  if bad then return bad end
  local n
  n, bad = arg_number(i + 6, 0, 1000)
  if bad then return bad end
  if i + 6 + n > #ARGV then return {-11, i + 6, ARGV[i + 6], 0, #ARGV - i - 6} end
  local last = g.expected - 1
  for j = 1, n do
    local t
    t, bad = arg_number(i + 6 + j, last + 1, 1e15)
    if bad then return bad end
    if g.next_ms >= 0 and t >= g.next_ms then
      return {-11, i + 6 + j, ARGV[i + 6 + j], tostring(last + 1), tostring(g.next_ms - 1)}
    end
    g.ticks[j] = math.floor(t)
    last = t
  end
  total = total + n
  if total > 1000 then return {-11, i + 6, ARGV[i + 6], 0, 'a total of 1000 ticks'} end
  groups[#groups + 1] = g
  i = i + 7 + n
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash',
                          KEYS[5], 'stream', KEYS[6], 'string'})
if wrong then return wrong end
local stale = fenced(KEYS[6], ARGV[1])
if stale then return stale end

local now = now_ms()
local out = {now, -1}
local created_all = 0
for _, g in ipairs(groups) do
  local status, created = 1, 0
  local def = redis.call('HGET', KEYS[1], g.name)
  local cur = redis.call('ZSCORE', KEYS[2], g.name)
  cur = cur and score_ms(cur)
  if not def then
    -- A next tick without a definition (never written by shardq): drop it.
    redis.call('ZREM', KEYS[2], g.name)
    status = 0
  elseif cur == nil or cur ~= g.expected or redis.sha1hex(def) ~= g.sha then
    status = 0
  elseif #g.ticks > 0 and g.ticks[#g.ticks] > now then
    status = 2
  else
    for _, t in ipairs(g.ticks) do
      local id = 'sq-sched:' .. g.name .. '@' .. string.format('%d', t)
      if redis.call('HSETNX', KEYS[4], id, 'S0|' .. g.body) == 1 then
        redis.call('XADD', KEYS[5], '*', 'j', id, 'd', string.format('%d', t))
        created = created + 1
      end
    end
    if g.next_ms >= 0 then
      redis.call('ZADD', KEYS[2], g.next_ms, g.name)
    else
      redis.call('ZREM', KEYS[2], g.name)
    end
    local s = sched_state(redis.call('HGET', KEYS[3], g.name))
    s[1] = now
    if #g.ticks > 0 then s[2] = g.ticks[#g.ticks] end
    s[3] = s[3] + created
    s[4] = s[4] + g.misfires
    redis.call('HSET', KEYS[3], g.name, sched_state_text(s))
    if created > 0 then
      count(KEYS[7], 'enqueued', created)
      count(KEYS[7], 'schedule_fired', created)
    end
    if g.misfires > 0 then count(KEYS[7], 'schedule_misfired', g.misfires) end
    created_all = created_all + created
  end
  out[#out + 1] = status
  out[#out + 1] = created
end
if created_all > 0 then redis.call('SPUBLISH', ARGV[2], '1') end
out[2] = head_ms(KEYS[2])
return out
