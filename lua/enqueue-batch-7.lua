--[[ enqueue-batch: store many jobs of ONE partition in one call (bulk enqueue).

Each job is validated and stored on its own, exactly as enqueue-8 does for a job without an
idempotency key (jobs with one go through enqueue-8, which owns the key's dedupe): a rejected
job writes nothing and does not stop the others.  Callers keep batches small (<= 100 jobs) so a
call stays well under a millisecond.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] ready    stream  due jobs
KEYS[4] stats    hash    counters (and the flags of a queue of layout < 4: lua/includes/lanes.lua)
KEYS[5] lane     zset    due jobs waiting for fetch, by fair-queueing score (lanes on)
KEYS[6] vtime    hash    virtual time and per-flow last score of the lane (lanes on)
KEYS[7] ctl      hash    the partition's flags (read only: lanes on or off; sealed by a resize)

ARGV[1] past tolerance ms               number 0..1e13 as tolerance
ARGV[2] horizon ms                      number 1..1e13 as horizon
ARGV[3] due-hint channel (sharded pub/sub): dispatcher wake-up when the head moves earlier
ARGV[4] ready-hint channel: worker wake-up when jobs land in the ready stream
ARGV[5..] 4 per job                     groups of 4
ARGV[i]   job id
ARGV[i+1] body (JSON)
ARGV[i+2] mode (see enqueue-8)          one of in|tin|tat|at
ARGV[i+3] ms                            number -1e15..1e15
Max ARGV: 1004  = 4 + 4 per job: at most 250 jobs; bulk enqueue sends 100 (shardq.store.producer.BATCH_JOBS)

Returns {now ms, then 2 per job: status, detail}
  status 1: created, detail = due ms
  status 2: this exact job was already stored (a resent call), detail = 0
  status -2 E_DUE_IN_PAST, -3 E_BEYOND_HORIZON (detail = due ms), -4 E_DUPLICATE_JOB_ID
or, for the whole call, before anything is written:
  {-14, role, key}                    E_NOT_PERMITTED: the caller is no producer (lua/includes/checks.lua)
  {-16, '<generation>:<partitions>'}  E_LAYOUT_MOVED: a resize empties this partition
                                      (lua/includes/resize.lua): enqueue into that generation
]]
--@include now.lua
--@include schedule.lua
--@include checks.lua
--@include lanes.lua
--@include compact.lua
--@include resize.lua

local denied = producer_only(KEYS[1], KEYS[2])
if denied then return denied end
local now = now_ms()
local lanes, wrong_ctl = lanes_on(KEYS[7], KEYS[4])
if wrong_ctl then return wrong_ctl end
local spec = {KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'stream'}
if lanes then
  for _, kv in ipairs({KEYS[5], 'zset', KEYS[6], 'hash'}) do spec[#spec + 1] = kv end
end
local wrong = wrong_type(spec)
if wrong then return wrong end
local moved = sealed_to(KEYS[7])
if moved then return {-16, moved} end

local out = {now}
local created, earliest, readied = 0, nil, 0
local laned = {}
for i = 5, #ARGV, 4 do
  local id, body = ARGV[i], ARGV[i + 1]
  local mode = ARGV[i + 2]
  local due, rejected = due_time(ENQUEUE_MODES[mode], ARGV[i + 3], now, tolerance, horizon)
  local compact = false
  local status = 1
  if not rejected then due, compact = timed_due(mode, due, id, now, horizon) end
  if rejected then
    status = rejected[1]
    if status == -2 then due = tonumber(ARGV[i + 3]) else due = tonumber(rejected[2]) end
  else
    local stored = stored_body(KEYS[1], KEYS[2], id, not compact)
    if stored ~= nil then
      if stored == body then status = 2 else status = -4 end
    elseif compact then
      -- The last check and the write in one: a fresh timed id is in the due set only if this
      -- very job was stored before (a resent call), as this very member.
      if redis.call('ZADD', KEYS[2], 'NX', due, id .. ' ' .. body) == 0 then
        status = 2
      else
        created = created + 1
        if not earliest or due < earliest then earliest = due end
      end
    end
  end
  if status == 1 and not compact then
    -- HSETNX (the id is known free): the producer's ACL grants no HSET, so it cannot
    -- overwrite a stored job.
    redis.call('HSETNX', KEYS[1], id, 'S0|' .. body)
    if due <= now then
      if lanes then
        laned[#laned + 1] = id
        laned[#laned + 1] = flow_at(body, 1)
        laned[#laned + 1] = due
      else
        redis.call('XADD', KEYS[3], '*', 'j', id, 'd', due)
      end
      readied = readied + 1
    else
      redis.call('ZADD', KEYS[2], due, id)
      if not earliest or due < earliest then earliest = due end
    end
    created = created + 1
  end
  out[#out + 1] = status
  out[#out + 1] = (status == 2 or status == -4) and 0 or due
end

if created > 0 then
  count(KEYS[4], 'enqueued', created)
end
lane_add(KEYS[5], KEYS[6], laned)
if readied > 0 then
  redis.call('SPUBLISH', ARGV[4], '1')
end
if earliest then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if head[2] and score_ms(head[2]) >= earliest then
    redis.call('SPUBLISH', ARGV[3], earliest)
  end
end
return out
