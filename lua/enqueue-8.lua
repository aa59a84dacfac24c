--[[ enqueue: store one job and put it in the due set, or straight into the ready stream (the
lane instead, in a partition with lanes on: lua/includes/lanes.lua).

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] ready    stream  due jobs
KEYS[4] idem     string  idempotency key -> job id (placeholder key when ARGV[8] == '0')
KEYS[5] stats    hash    counters (and the flags of a queue of layout < 4: lua/includes/lanes.lua)
KEYS[6] lane     zset    due jobs waiting for fetch, by fair-queueing score (lanes on)
KEYS[7] vtime    hash    virtual time and per-flow last score of the lane (lanes on)
KEYS[8] ctl      hash    the partition's flags (read only: lanes on or off; sealed by a resize)

ARGV[1] job id
ARGV[2] body (JSON, opaque to the script but for its '@<level><tenant>@' prefix, if any)
ARGV[3] 'at' (ARGV[4] is an absolute ms time) or 'in' (ARGV[4] is a    one of in|tin|tat|at
        delay in ms from Redis now); 'tat'/'tin' the same for a timed id the producer has just
        generated, in a queue of layout 3: the job then waits compactly
        (lua/includes/compact.lua), for 'tin' at the id's time when that is within 250 ms of
        now + delay
ARGV[4] ms value                                                       number -1e15..1e15
ARGV[5] past tolerance ms: an 'at' time older than now - tolerance is  number 0..1e13 as tolerance
        rejected
ARGV[6] horizon ms: a due time later than now + horizon is rejected    number 1..1e13 as horizon
ARGV[7] idempotency retention ms, counted from the due time            number 1..1e13 as retention
ARGV[8] '1' when KEYS[4] is a real idempotency key
ARGV[9] due-hint channel (sharded pub/sub, same slot): dispatcher wake-up when the head moves
ARGV[10] ready-hint channel: worker wake-up when a job lands in the ready stream
ARGV[11] uniqueness of the idempotency key: '' (the key dedupes for its retention, whatever
        became of the job) or 'done' (it dedupes only while its job is stored and not dead:
        waiting, ready, running or retrying; once the job completed, was cancelled or died, the
        key is stale and this enqueue takes it for a new job) or 'debounce' (while its job still
        waits in the due set, this enqueue replaces the job's body and moves it to this due
        time, keeping its id: {3, ...}; once it was promoted, started or done, a new job).
        A debounce acts only on a key a debounce created, for the same job type and tenant:
        the key then holds '<job id> d:<type>@<tenant>' (any other key holds the bare job id;
        a key from before this rule is taken for a debounce one while its job waits, has that
        type and tenant, and the key expires 1 s after the job's due time, as such keys did);
        any other key is refused with E_KEY_IN_USE, nothing written

Returns
  {1, job id, due ms, now ms}         created
  {2, job id, 0, now ms}              this exact job was already stored (a resent call)
  {0, existing job id, 0, now ms}     idempotency key already used (with ARGV[11] 'done': by a
                                      job not yet done): nothing written
  {3, existing job id, due ms, now ms}  debounced (ARGV[11] 'debounce'): the waiting job took this
                                      body and due time
  {-20, job id of the key}            E_KEY_IN_USE: ARGV[11] 'debounce' with a key no debounce of
                                      this job type and tenant created
  {-14, 'producer', key}              E_NOT_PERMITTED: a debounce by a user that may not make its
                                      writes (lua/includes/checks.lua refused_writes)
  {-2, at, now, tolerance}            E_DUE_IN_PAST
  {-3, due, now, horizon}             E_BEYOND_HORIZON
  {-4, job id}                        E_DUPLICATE_JOB_ID
  {-16, '<generation>:<partitions>', job id}  E_LAYOUT_MOVED: a resize empties this partition
                                      (lua/includes/resize.lua): enqueue into that generation
]]
--@include now.lua
--@include schedule.lua
--@include checks.lua
--@include lanes.lua
--@include compact.lua
--@include resize.lua

-- debounce_owner(body): who a debounce key belongs to, 'd:<job type>@<tenant>', read from the
-- body it was made with ('@<level><tenant>@' prefix, then '["<type>", ...'; job types and
-- tenants hold no '"', '@' or spaces).
local function debounce_owner(body)
  local tenant, from = '', 1
  local t, after = string.match(body, '^@[hnl]([%w_.:%-]*)@()')
  if t then tenant, from = t, after end
  return 'd:' .. (string.match(body, '^%["([^"\\]*)"', from) or '') .. '@' .. tenant
end

-- body_of(v): the body of an envelope '<state><attempt>|<body>'.
local function body_of(v)
  local bar = string.find(v, '|', 1, true)
  return bar and string.sub(v, bar + 1) or ''
end

-- The retention of a debounce key before keys named their owner (ProducerSettings and the
-- TypeScript producer both sent 1 s): such a key expires that long after its job's due time,
-- to the ms the script took to write it; a plain or unique key, a day or a week after.
local LEGACY_DEBOUNCE_RETENTION_MS = 1000
local LEGACY_SLACK_MS = 100

-- legacy_debounce_key(key, score): whether an idempotency key holding a bare job id was made by
-- a debounce before keys named their owner, judged by its expiry against its waiting job's due
-- time (score).  Such keys are gone a second after their job came due.
local function legacy_debounce_key(key, score)
  local expires = tonumber(redis.call('PEXPIRETIME', key))
  local gap = expires - score_ms(score) - LEGACY_DEBOUNCE_RETENTION_MS
  return expires > 0 and gap >= 0 and gap <= LEGACY_SLACK_MS
end

local now = now_ms()
local idem = ARGV[8] == '1'
local due, rejected = due_time(ENQUEUE_MODES[ARGV[3]], ARGV[4], now, tolerance, horizon)
if rejected then return rejected end
local compact
due, compact = timed_due(ARGV[3], due, ARGV[1], now, horizon)
-- Only a job due at once goes to the lane: a later one waits in due, as without lanes.
local lanes, wrong_ctl = false, nil
if due <= now then lanes, wrong_ctl = lanes_on(KEYS[8], KEYS[5]) end
if wrong_ctl then return wrong_ctl end
local types = {KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'stream'}
if lanes then
  for _, kv in ipairs({KEYS[6], 'zset', KEYS[7], 'hash'}) do types[#types + 1] = kv end
end
if idem then
  types[#types + 1] = KEYS[4]
  types[#types + 1] = 'string'
end
local wrong = wrong_type(types)
if wrong then return wrong end

local id = ARGV[1]
local moved = sealed_to(KEYS[8])
if moved then return {-16, moved, id} end
local key_value = id  -- what the idempotency key will hold: the job id, and a debounce's owner
if idem then
  local existing, owner = redis.call('GET', KEYS[4]), nil
  if existing then existing, owner = split_member(existing) end  -- '<job id> d:<type>@<tenant>'
  if existing and ARGV[11] == 'done' then
    -- The key's job is in this partition (it routes by the key): done once it is gone (acked,
    -- cancelled) or dead; a compact waiting job is a due-set member only.
    local v = redis.call('HGET', KEYS[1], existing)
    local alive
    if v then alive = string.sub(v, 1, 1) ~= 'D' else alive = compact_find(KEYS[2], existing) ~= nil end
    if not alive then existing = nil end
  elseif ARGV[11] == 'debounce' then
    local want = debounce_owner(ARGV[2])
    key_value = id .. ' ' .. want
    if existing then
      local v = redis.call('HGET', KEYS[1], existing)
      local member, score
      if v then
        score = redis.call('ZSCORE', KEYS[2], existing)
      else
        member, score = compact_find(KEYS[2], existing)
      end
      local waiting = member ~= nil or (v ~= false and v ~= nil and score ~= false)
      if owner == nil and waiting and legacy_debounce_key(KEYS[4], score) then
        owner = debounce_owner(member and select(2, split_member(member)) or body_of(v))
      end
      -- Keys are queue-global: another caller's key, or another job type's or tenant's burst,
      -- is not this burst's to replace.
      if owner ~= want then return {-20, existing} end
      if not waiting then
        existing = nil  -- promoted, started or done: this enqueue is a new run
      else
        -- Every write asked for first: a user without one is refused whole, nothing written.
        local denied = refused_writes('producer', {
          member and {'ZREM', KEYS[2], member} or {'HDEL', KEYS[1], existing},
          {'HSETNX', KEYS[1], existing, 'v'}, {'ZADD', KEYS[2], '0', existing},
          {'SET', KEYS[4], existing}, {'SPUBLISH', ARGV[9], '0'},
        })
        if denied then return denied end
        if member then
          -- A compact job takes the plain layout: its id no longer tells its due time.
          redis.call('ZREM', KEYS[2], member)
          redis.call('HSETNX', KEYS[1], existing, 'S0|' .. ARGV[2])
        else
          -- HDEL and HSETNX, not HSET: the producer's ACL grants no HSET on envelopes.
          local bar = string.find(v, '|', 1, true) or 2
          redis.call('HDEL', KEYS[1], existing)
          redis.call('HSETNX', KEYS[1], existing, string.sub(v, 1, bar - 1) .. '|' .. ARGV[2])
        end
        redis.call('ZADD', KEYS[2], due, existing)
        redis.call('SET', KEYS[4], existing .. ' ' .. want, 'PX',
          math.floor(math.max(due - now, 0) + retention))
        if redis.call('ZRANGE', KEYS[2], 0, 0)[1] == existing then
          redis.call('SPUBLISH', ARGV[9], due)
        end
        count(KEYS[5], 'debounced', 1)
        return {3, existing, due, now}
      end
    end
  end
  if existing then
    return {0, existing, 0, now}
  end
end
-- The same body under the same id is this very call sent again (a retry after a lost reply),
-- or an identical job under the same id: either way it is stored, so report it.
local stored = stored_body(KEYS[1], KEYS[2], id, not compact)
if stored ~= nil then
  if stored == ARGV[2] then return {2, id, 0, now} end
  return {-4, id}
end
local member = id
if compact then
  -- The last check and the first write in one: a fresh timed id is in the due set only if
  -- this very call stored it before (a resend), as this very member.
  member = id .. ' ' .. ARGV[2]
  if redis.call('ZADD', KEYS[2], 'NX', due, member) == 0 then return {2, id, 0, now} end
end

-- Writes from here on; nothing below can fail on shardq's own keys.
-- HSETNX (the id is known free): the producer's ACL grants no HSET, so it cannot overwrite
-- a stored job.
if not compact then redis.call('HSETNX', KEYS[1], id, 'S0|' .. ARGV[2]) end
if idem then
  redis.call('SET', KEYS[4], key_value, 'PX', math.floor(math.max(due - now, 0) + retention))
end
if due <= now then
  if lanes then
    lane_add(KEYS[6], KEYS[7], {id, flow_at(ARGV[2], 1), due})
  else
    redis.call('XADD', KEYS[3], '*', 'j', id, 'd', due)
  end
  redis.call('SPUBLISH', ARGV[10], '1')
else
  if not compact then redis.call('ZADD', KEYS[2], due, id) end
  -- Wake the dispatcher only when this job is now the earliest: it sleeps until the head.
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if head[1] == member then
    redis.call('SPUBLISH', ARGV[9], due)
  end
end
count(KEYS[5], 'enqueued', 1)
return {1, id, due, now}
