--@include checks.lua
-- A job envelope in the jobs hash is '<state><attempt>|<json body>'.
--   state: S = waiting (due set or ready stream, not started), A = running (held by a worker),
--          D = dead (in the dead-letter stream), L = waiting for the start a rate limit
--          reserved for it (lua/defer-4.lua): otherwise as S
--   attempt: how many times a worker has started it, a whole number 0..MAX_ATTEMPT.
-- Scripts rewrite the short header and never parse the body, so payloads pass through untouched.
local MAX_ATTEMPT = 1000000000

-- split_envelope(v): state, attempt, body; nil when v is not an envelope (no '|').  An attempt
-- that is not a whole number 0..MAX_ATTEMPT (nan, inf, hex, a fraction: written by hand or a
-- bug) gives state, nil, body: the caller dead-letters the job as malformed (malformed()),
-- since its attempts could never be counted (nan + 1 stays nan: it would retry forever).
local function split_envelope(v)
  local bar = string.find(v, '|', 1, true)
  if not bar then return nil end
  return string.sub(v, 1, 1), int_of(string.sub(v, 2, bar - 1), 0, MAX_ATTEMPT),
    string.sub(v, bar + 1)
end

-- bad_attempt(id, v): the dead letter's reason for an envelope whose attempt is unreadable.
local function bad_attempt(id, v)
  local bar = string.find(v, '|', 1, true) or 2
  return 'malformed envelope for job ' .. id .. ': attempt ' ..
    string.format('%q', string.sub(v, 2, math.min(bar - 1, 41))) .. ' is not a whole number 0..' ..
    MAX_ATTEMPT
end

-- ready_fields(f): the job id and due ms of a ready-stream entry's field list, or nil.
local function ready_fields(f)
  local id, due
  for i = 1, #f, 2 do
    if f[i] == 'j' then id = f[i + 1] elseif f[i] == 'd' then due = f[i + 1] end
  end
  return id, due
end

-- finite_due(d): a ready entry's due ms as given, or '' when it is not a finite number (a
-- record written by hand): the job still runs, its lateness is unknown.
local function finite_due(d)
  if float_of(d, -MAX_MS, MAX_MS) == nil then return '' end
  return d
end

-- bump(stats, field): add one to a counter; advisory, so never fails the script (see count()).
local function bump(stats, field)
  local r = redis.pcall('HINCRBY', stats, field, 1)
  if type(r) == 'table' and r['err'] then redis.pcall('HSET', stats, field, 1) end
end

-- dead_letter(keys, id, attempt, body, reason, now): mark the envelope dead and record why.
-- keys = {jobs, dead, errors, stats}
local function dead_letter(keys, id, attempt, body, reason, now)
  redis.call('HSET', keys[1], id, 'D' .. attempt .. '|' .. body)
  redis.call('HSET', keys[3], id, reason)
  redis.call('XADD', keys[2], '*', 'j', id, 'a', attempt, 'e', reason, 't', now)
  bump(keys[4], 'dead')
end

-- The stats counter 'malformed' counts what a script dead-letters because it is not a job it
-- can count (the two functions below), not every dead letter (attempts used up, poison jobs).

-- dead_letter_bad_attempt(keys, id, v, body, now): dead_letter for an envelope whose attempt
-- is unreadable: attempt 0, its body kept (a replay starts it afresh).
local function dead_letter_bad_attempt(keys, id, v, body, now)
  dead_letter(keys, id, 0, body, bad_attempt(id, v), now)
  bump(keys[4], 'malformed')
end

-- dead_letter_raw(keys, fields, reason, now): record a ready entry that is not a job at all.
local function dead_letter_raw(keys, fields, reason, now)
  redis.call('XADD', keys[2], '*', 'e', reason, 'raw', cjson.encode(fields), 't', now)
  bump(keys[4], 'dead')
  bump(keys[4], 'malformed')
end

-- drop_unrunnable(keys, ready, group, eid, f, id, v, state, attempt, body, now): settle a
-- ready entry (id eid, fields f) that holds no job to run, and say whether it did: one with no
-- job id field or a malformed envelope (dead-lettered raw, the envelope dropped), one whose job
-- has no envelope (cancelled after promotion: nothing to run), one whose attempt cannot be
-- counted (dead, its body kept: a replay starts it at 0); each is acknowledged and left for the
-- dispatcher's trim, as an ack leaves it (lua/ack-4.lua): an XDEL of the group's newest read
-- entry makes Redis 7.0 report the group's lag as unknown until the group reads to the end of
-- the stream (then partition-stats had to guess the ready count).  id, v, state, attempt,
-- body: ready_fields' id, the envelope and split_envelope's parts (nil where missing).  False,
-- nothing written, for a job to run.  keys = {jobs, dead, errors, stats}.  (fetch-9.lua and
-- reclaim-7.lua.)
local function drop_unrunnable(keys, ready, group, eid, f, id, v, state, attempt, body, now)
  if not id then
    dead_letter_raw(keys, f, 'malformed ready entry: no job id field', now)
  elseif not v then
    -- Cancelled after promotion: nothing to run, nothing to record.
  elseif not state then
    dead_letter_raw(keys, f, 'malformed envelope for job ' .. id, now)
    redis.call('HDEL', keys[1], id)
  elseif not attempt then
    dead_letter_bad_attempt(keys, id, v, body, now)
  else
    return false
  end
  redis.call('XACK', ready, group, eid)
  return true
end
