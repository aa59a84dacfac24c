--@include checks.lua
-- Lanes: priorities and fair sharing between tenants inside one partition.
--
-- A partition whose lanes are on (lua/lanes-3.lua) does not append due jobs to
-- its ready stream: it keeps them in its lane sorted set, and fetch moves them to the stream
-- in score order as workers ask (lua/fetch-9.lua).  The ready stream then holds what workers
-- hold, so a job entering the lane is never behind a backlog already in the stream.
--
-- The order is start-time fair queueing.  A flow is a priority level and a tenant ('h', 'n' or
-- 'l' followed by the tenant, '' when none).  The vtime hash keeps V (field 'V'), the score of
-- the last job fetched, and per flow the score of its last job in the lane.  A job of flow f
-- enters with score max(V, last[f]) + cost(level): each backlogged flow advances by its cost
-- per job, so deliveries are shared in inverse proportion to the costs (high 10, default 20,
-- low 60: 6:3:1 between levels, round-robin between tenants of one level), and a flow that
-- had nothing waiting starts level with V instead of behind everyone's backlog.  Integer
-- scores stay exact in a double (a partition would need 10^12 jobs to reach 2^53).
--
-- A lane member is '<due ms> <flow> <job id>': fetch needs the due time for the stream entry
-- (lateness) and the flow to drop the vtime field of a flow that has nothing left.
local LANE_COST = {h = 10, n = 20, l = 60}
-- Scores stay exact integers in a double up to 2^53; a vtime value that is not a number in
-- [0, 2^53] (nan, inf, text: written by hand) reads as 0, the start of time: the flow (or V)
-- starts again from there, so a damaged field costs fairness once, never a job or a call.
local MAX_VTIME = 2 ^ 53

-- vtime_of(v): a vtime hash value, checked (see MAX_VTIME).
local function vtime_of(v)
  return float_of(v, 0, MAX_VTIME) or 0
end

-- flow_at(s, pos): the flow of a job body starting at pos of s.  A body is plain JSON, or
-- '@<level><tenant>@<JSON>' when the job has a priority or a tenant (shardq.jobs.encode_body).
local function flow_at(s, pos)
  if string.byte(s, pos) ~= 64 then return 'n' end -- '@'
  local level, tenant = string.match(s, '^@([hnl])([%w_.:%-]*)@', pos)
  if not level then return 'n' end
  return level .. tenant
end

-- with_level(v, level): envelope v with its job's priority level set to level ('h', 'n' or
-- 'l'), the tenant kept.  A default-level job without a tenant has no prefix.
local function with_level(v, level)
  local bar = string.find(v, '|', 1, true)
  if not bar then return v end
  local start, flow = bar + 1, 'n'
  local old_level, tenant, after = string.match(v, '^@([hnl])([%w_.:%-]*)@()', bar + 1)
  if old_level then
    start = after
  else
    tenant = ''
  end
  flow = level .. tenant
  local prefix = ''
  if flow ~= 'n' then prefix = '@' .. flow .. '@' end
  return string.sub(v, 1, bar) .. prefix .. string.sub(v, start)
end

-- envelope_flow(v): the flow of a stored envelope '<state><attempt>|<body>'.
local function envelope_flow(v)
  local bar = string.find(v, '|', 1, true)
  if not bar then return 'n' end
  return flow_at(v, bar + 1)
end

-- The partition's flags live in its control hash ({...}:ctl), which only the operator and
-- admin roles may write (lua/pause-2.lua, lua/lanes-3.lua: every other role reads it, never
-- writes it): 'paused' = '1' while paused; 'lanes' = '1' on, '2' turned off while jobs may
-- still wait in the lane (fetch keeps reading the lane while it exists), '0' off.  The 'lanes'
-- field is always there once the control hash is in use, so it also says that: a partition of
-- a queue created before the control hash (queue layout < 4) has none, and keeps its flags in
-- the stats hash (lanes absent: off), as before, until `shardq queue upgrade` moves them
-- (lua/control-init-2.lua).  So the readers below cost what they did (one HGET or HMGET of the
-- same fields) for a queue of this layout.  A partition without lanes never touches its lane keys
-- (nor checks their types).

-- ctl_error(ctl, r): the reply for a failed read of the control hash: E_WRONG_TYPE when it
-- holds another type, else the error itself (an ACL refusal), which the script then returns.
local function ctl_error(ctl, r)
  if string.find(r['err'], 'WRONGTYPE', 1, true) then
    return {-10, ctl, redis.call('TYPE', ctl)['ok'], 'hash'}
  end
  return r
end

-- partition_flags(ctl, stats): paused (boolean), the lanes field ('1', '2' or false), and nil;
-- or false, false and the E_WRONG_TYPE reply when the control hash is not a hash (its flags are
-- not advisory, unlike the counters: a legacy stats key of the wrong type reads as no flags).
local function partition_flags(ctl, stats)
  local r = redis.pcall('HMGET', ctl, 'paused', 'lanes')
  if r['err'] then return false, false, ctl_error(ctl, r) end
  if not r[2] then
    r = redis.pcall('HMGET', stats, 'paused', 'lanes')
    if r['err'] then return false, false, nil end
  end
  local lanes = r[2]
  if lanes ~= '1' and lanes ~= '2' then lanes = false end
  return r[1] == '1', lanes, nil
end

-- lanes_on(ctl, stats): whether the partition keeps due jobs in its lane, and the E_WRONG_TYPE
-- reply when its control hash is not a hash (see partition_flags).
local function lanes_on(ctl, stats)
  -- HGET, not HMGET: a call that enqueues one job feels the difference (0.3 against 0.7 us).
  local lanes = redis.pcall('HGET', ctl, 'lanes')
  if type(lanes) == 'table' then return false, ctl_error(ctl, lanes) end
  if not lanes then lanes = redis.pcall('HGET', stats, 'lanes') end
  return lanes == '1', nil
end

-- flags_key(ctl, stats): where the partition's flags are written: its control hash once in
-- use, else (a queue created before it) its stats hash, where this partition's readers look.
local function flags_key(ctl, stats)
  if redis.call('HEXISTS', ctl, 'lanes') == 1 then return ctl end
  return stats
end

-- lane_add(lane, vtime, items): items = {job id, flow, due ms, ...}; scores them (see above)
-- and adds them to the lane.  Returns how many were added.
local function lane_add(lane, vtime, items)
  if #items == 0 then return 0 end
  local v = vtime_of(redis.call('HGET', vtime, 'V'))
  local last = {}
  local args = {}
  for i = 1, #items, 3 do
    local f = items[i + 1]
    local t = last[f]
    if t == nil then t = vtime_of(redis.call('HGET', vtime, f)) end
    if t < v then t = v end
    t = t + (LANE_COST[string.sub(f, 1, 1)] or LANE_COST.n)
    last[f] = t
    args[#args + 1] = t
    args[#args + 1] = items[i + 2] .. ' ' .. f .. ' ' .. items[i]
    if #args >= 1000 then
      redis.call('ZADD', lane, unpack(args))
      args = {}
    end
  end
  if #args > 0 then redis.call('ZADD', lane, unpack(args)) end
  local fields = {}
  for f, t in pairs(last) do
    fields[#fields + 1] = f
    fields[#fields + 1] = t
  end
  redis.call('HSET', vtime, unpack(fields))
  return #items / 3
end

-- lane_pop(lane, vtime, n): the n lowest-scored lane jobs as {job id, due ms, ...}, removed;
-- V moves to the last one's score and flows with nothing left lose their vtime field.
local function lane_pop(lane, vtime, n)
  local popped = redis.call('ZPOPMIN', lane, n)
  local out = {}
  if #popped == 0 then return out end
  -- A lane score is one lane_add wrote, unless someone else did (inf, a negative): V and the
  -- flows' clean-up then use it checked, like any vtime value.
  local v = vtime_of(popped[#popped])
  local seen = {}
  for i = 1, #popped, 2 do
    local due, f, id = string.match(popped[i], '^(%S*) (%S*) (.*)$')
    if id then
      out[#out + 1] = id
      out[#out + 1] = due
      seen[f] = true
    end
  end
  redis.call('HSET', vtime, 'V', v)
  for f in pairs(seen) do
    if vtime_of(redis.call('HGET', vtime, f)) <= v then redis.call('HDEL', vtime, f) end
  end
  return out
end
