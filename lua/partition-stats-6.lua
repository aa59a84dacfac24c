--[[ partition-stats: one consistent snapshot of a partition's backlog, delivery and counters.

Bounded: ZCARD, ZCOUNT, XLEN and XINFO GROUPS are O(1) or O(log n); XPENDING reads one entry.

KEYS[1] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[2] ready    stream  due jobs
KEYS[3] dead     stream  dead letters
KEYS[4] stats    hash    counters
KEYS[5] lane     zset    due jobs waiting for fetch with lanes on (counted as undelivered)
KEYS[6] ctl      hash    the partition's flags (lua/includes/lanes.lua)

ARGV[1] consumer group

Returns {now ms, due, overdue, oldest due ms or -1, ready jobs (undelivered), pending,
         oldest pending idle ms or -1, dead letters, consumers, counters as a flat hash}
  Ready jobs are the stream's undelivered entries (the group's lag) and the lane's jobs, less
  the entries of jobs cancelled after promotion that no worker has read yet (stats field
  'voided', kept by lua/cancel-7.lua and lua/fetch-9.lua; not among the counters).  Lag is
  unknown (nil) after an XDEL of an entry at or after the group's last delivered one (Redis
  7.0: until the group reads to the end of the stream); shardq's reads and cancels delete no
  such entry, a failure's or a deferral's settle may (its own entry, when it was the newest
  read): then the stream's length less the pending entries stands in, which also counts
  acknowledged entries the trim has not taken yet.
  The counters end with the flags where they apply (control hash, or the stats hash of a queue
  of layout < 4): 'paused' 1 while paused, 'lanes' 1 on, 2 off with jobs left in the lane.

Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua
--@include lanes.lua

-- The stats hash is advisory: of the wrong type, it reads as no counters (the backlog figures
-- still matter more than the counters).
local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'stream', KEYS[3], 'stream', KEYS[5], 'zset'})
if wrong then return wrong end
local paused, lanes, wrong_ctl = partition_flags(KEYS[6], KEYS[4])
if wrong_ctl then return wrong_ctl end

local now = now_ms()
local due = redis.call('ZCARD', KEYS[1])
local overdue = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local oldest = -1
if due > 0 then
  oldest = score_ms(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2])
end
local undelivered, pending, oldest_idle, consumers = 0, 0, -1, 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  local length = redis.call('XLEN', KEYS[2])
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == ARGV[1] then
      pending = info['pending']
      consumers = info['consumers']
      -- lag is unknown (nil) after some deletions; then count what is not pending.
      undelivered = info['lag'] or math.max(length - pending, 0)
    end
  end
  if pending > 0 then
    local first = redis.call('XPENDING', KEYS[2], ARGV[1], '-', '+', 1)[1]
    if first then oldest_idle = first[3] end
  end
end
-- Jobs in the lane are due and waiting for a worker, exactly like undelivered entries.
undelivered = undelivered + redis.call('ZCARD', KEYS[5])
local dead = 0
if redis.call('EXISTS', KEYS[3]) == 1 then dead = redis.call('XLEN', KEYS[3]) end
local counters = {}
local voided = 0
if redis.call('TYPE', KEYS[4])['ok'] == 'hash' then
  -- The stats hash's own 'paused'/'lanes' fields mean something only for a queue of layout < 4,
  -- and partition_flags has read them then: the flags come from there, once.
  local all = redis.call('HGETALL', KEYS[4])
  for i = 1, #all, 2 do
    if all[i] == 'voided' then
      voided = int_of(all[i + 1], 0, 1e15) or 0
    elseif all[i] ~= 'paused' and all[i] ~= 'lanes' then
      counters[#counters + 1] = all[i]
      counters[#counters + 1] = all[i + 1]
    end
  end
end
-- Cancelled after promotion, not read yet: their entries wait, their jobs are gone.
undelivered = math.max(undelivered - voided, 0)
if paused then
  counters[#counters + 1] = 'paused'
  counters[#counters + 1] = '1'
end
if lanes then
  counters[#counters + 1] = 'lanes'
  counters[#counters + 1] = lanes
end
return {now, due, overdue, oldest, undelivered, pending, oldest_idle, dead, consumers, counters}
