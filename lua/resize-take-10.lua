--[[ resize-take: take the next batch of a sealed partition's waiting work out of it, for a
resize to store in the new generation (lua/resize-put-*.lua), then drop (resize-ack-1).

What waits moves: schedules first (few: their ticks then fire in the new generation), then
due-now jobs of the lane, then the due set (scheduled, retrying, compact members, jobs a rate
limit deferred) earliest first, then dead letters with their envelopes.  What is ready or
running stays: workers drain it in place.  The batch goes into 'moving' (job id or
'sched:<name>', or 'dead:<entry id>' for a dead letter whose job is no longer dead -> record, and '' -> the batch id), so no promote, fetch
or by-id call acts on it twice: a by-id call that misses answers E_JOB_MOVING while it is
there.  While 'moving' holds a batch, this call answers that same batch again (a resumed
resize stores it again, which the put recognises by the batch id).

KEYS[1] due      zset    job id (or '<id> <body>') scored by due ms
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] lane     zset    due jobs waiting for fetch: '<due> <flow> <job id>'
KEYS[5] moving   hash    the batch taken out (above)
KEYS[6] dead     stream  dead letters
KEYS[7] sched    hash    schedule name -> definition JSON
KEYS[8] sched:next zset  schedule name scored by next tick
KEYS[9] ctl      hash    the partition's flags: must be sealed
KEYS[10] sched:state hash schedule name -> state

ARGV[1] most records in one batch       number 1..1000 as limit
ARGV[2] batch id prefix (the batch id is '<prefix><n>', n counted in ctl 'batches')

Returns {batch id, count, then per record: its routing key (job id or schedule name), record}
  with record the JSON object: k = 'j' (a waiting job: s = due ms; m = compact member, or
  e = envelope, r = last error), 's' (a schedule: d = definition, x = next tick ms, st =
  state) or 'x' (a dead letter: f = its fields, e = envelope, r = last error); count 0 and no
  batch id when nothing waits
  {-11, 0, 'unsealed', ...}           E_BAD_ARGUMENT: the partition is not sealed

Flags: allow-oom  (it frees memory in this partition)
]]
--@include checks.lua
--@include compact.lua
--@include resize.lua

local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'zset',
  KEYS[5], 'hash', KEYS[6], 'stream', KEYS[7], 'hash', KEYS[8], 'zset', KEYS[9], 'hash',
  KEYS[10], 'hash'})
if wrong then return wrong end
if not sealed_to(KEYS[9]) then return {-11, 0, 'unsealed', 'sealed', 'sealed'} end

local function reply_of(flat)
  local out = {false, 0}
  for i = 1, #flat, 2 do
    if flat[i] == '' then
      out[1] = flat[i + 1]
    else
      local r = cjson.decode(flat[i + 1])
      out[#out + 1] = r.i
      out[#out + 1] = flat[i + 1]
      out[2] = out[2] + 1
    end
  end
  return out
end

local held = redis.call('HGETALL', KEYS[5])
if #held > 0 then return reply_of(held) end

local sched_state = KEYS[10]
local fields = {}
local n = 0
local function keep(field, record)
  fields[#fields + 1] = field
  fields[#fields + 1] = cjson.encode(record)
  n = n + 1
end
local function plain_job(id, due)
  local env = redis.call('HGET', KEYS[2], id)
  local err = redis.call('HGET', KEYS[3], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  return {k = 'j', i = id, s = due, e = env or false, r = err or false}
end

-- schedules
for _, name in ipairs(redis.call('HKEYS', KEYS[7])) do
  if n >= limit then break end
  local nxt = redis.call('ZSCORE', KEYS[8], name)
  keep('sched:' .. name, {k = 's', i = name, d = redis.call('HGET', KEYS[7], name),
    x = nxt or false, st = redis.call('HGET', sched_state, name) or false})
  redis.call('HDEL', KEYS[7], name)
  redis.call('ZREM', KEYS[8], name)
  redis.call('HDEL', sched_state, name)
end
-- due-now jobs in the lane: they wait again in the new partition's due set, due now
if n < limit then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[4], 0, limit - n - 1)) do
    -- '<due> <flow> <job id>': job ids hold no space, a flow may be empty
    local due, _, id = string.match(member, '^(%S+) (.*) (%S+)$')
    if id then
      local env = redis.call('HGET', KEYS[2], id)
      if env then keep(id, plain_job(id, due)) end
    end
    redis.call('ZREM', KEYS[4], member)
  end
end
-- the due set, earliest first
if n < limit then
  local due = redis.call('ZRANGE', KEYS[1], 0, limit - n - 1, 'WITHSCORES')
  for i = 1, #due, 2 do
    local member, score = due[i], due[i + 1]
    local id, body = split_member(member)
    if body then
      keep(id, {k = 'j', i = id, s = score, m = member})
    else
      keep(id, plain_job(id, score))
    end
    redis.call('ZREM', KEYS[1], member)
  end
end
-- dead letters, oldest first
if n < limit then
  local entries = redis.call('XRANGE', KEYS[6], '-', '+', 'COUNT', limit - n)
  for _, entry in ipairs(entries) do
    local f, id = entry[2], nil
    for i = 1, #f, 2 do if f[i] == 'j' then id = f[i + 1] end end
    id = id or ''
    local record = {k = 'x', i = id, f = f, e = false, r = false}
    local env = id ~= '' and redis.call('HGET', KEYS[2], id)
    local field = 'dead:' .. entry[1]
    -- The envelope goes with its dead letter only while it is still dead (not run again).
    if env and string.sub(env, 1, 1) == 'D' then
      record.e = env
      record.r = redis.call('HGET', KEYS[3], id) or false
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
      field = id  -- a by-id call finds it in 'moving' (lua/includes/resize.lua)
    end
    keep(field, record)
    redis.call('XDEL', KEYS[6], entry[1])
  end
end
if n == 0 then return {false, 0} end
local batch = ARGV[2] .. redis.call('HINCRBY', KEYS[9], 'batches', 1)
fields[#fields + 1] = ''
fields[#fields + 1] = batch
redis.call('HSET', KEYS[5], unpack(fields))
return reply_of(fields)
