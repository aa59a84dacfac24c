--[[ fetch: hand up to ARGV[3] new ready jobs of one partition to a worker, with their envelopes;
first promoting its due jobs when asked (ARGV[4]).

A worker that reads a partition when its head job comes due asks this call to promote first:
the due jobs move to the ready stream as the dispatcher's promote would move them
(lua/includes/promote.lua, at most ARGV[3]) and are read in the same call, so a job costs one
call instead of a promote and a fetch, and the dispatcher's promote is left to backlogs and to
partitions no worker reads in time (shardq/dispatcher/promoter.py).  Not in a partition with
lanes on (its due jobs go through the lane, which the dispatcher's promote fills) nor while it
is paused.  The reply then carries the partition's next due time, when the worker reads it
again.

Reads the ready stream through the consumer group and marks each job active, so a cancel that
comes later reports it running instead of pretending to stop it.  When the stream has fewer
than ARGV[3] new entries, the rest come from the lane (lua/includes/lanes.lua): its
lowest-scored jobs are appended to the stream and read at once, so the ready stream of a
partition with lanes on holds little more than what workers hold.  Entries appended to the
stream directly (run-now, dead-letter replay, periodic jobs, a backlog from before lanes were
turned on) go first.  A ready entry (or lane job) whose job was cancelled after promotion has
no envelope: it is acknowledged and dropped, and the partition's count of such entries
(stats field 'voided', lua/cancel-7.lua) goes down by one; a malformed entry or envelope goes
to the dead stream (an envelope whose attempt is not a whole number 0..1e9 dead as a job, its
body kept).  A read goes on past such entries, up to MAX_SKIPPED of them in MAX_PASSES reads
a call (4-8 us each reading 21 at a time, 8-19 reading one at a time; under a millisecond a
call), so that a cancelled or emptied backlog neither looks like an idle partition to the
worker nor holds up the jobs behind it; the reply says when it stopped there with entries left
(more = 1: the worker reads again at once).  Dropped entries are acknowledged, not deleted (the
trim takes them, as after an ack): an XDEL of the group's newest read entry makes Redis 7.0
report its lag as unknown (see lua/partition-stats-6.lua).

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] dead     stream  dead letters
KEYS[4] errors   hash    job id -> last error
KEYS[5] stats    hash    counters (and the flags of a queue of layout < 4: lua/includes/lanes.lua)
KEYS[6] lane     zset    due jobs waiting for fetch, by fair-queueing score (lanes on, or off and
                         not yet empty)
KEYS[7] vtime    hash    virtual time and per-flow last score of the lane
KEYS[8] ctl      hash    the partition's flags, 'paused' and 'lanes' (read only)
KEYS[9] due      zset    job id (or '<id> <body>', a compact job) scored by due ms

ARGV[1] consumer group
ARGV[2] consumer (worker) name                                         name
ARGV[3] max entries to read                                            number 1..1000 as n
ARGV[4] '1': promote the partition's due jobs first (up to ARGV[3]);   flag
        '0': read only
ARGV[5] horizon ms: the reply counts the waiting jobs due by the next  number 0..86400000 as horizon
        due time plus this (the worker's share of the lateness budget: when it reads the
        partition next)
ARGV[6..] pairs of (entry id, job id) of this partition's jobs whose   groups of 2
        handlers succeeded: settled first (lua/includes/acks.lua), paused or not, so a
        finished job's ack rides with the next read of its partition instead of a call of its
        own (BullMQ's moveToFinished fetches the next job the same way)
Max ARGV: 2005  = 5 + 2 per ack: at most 1000 acks (shardq.store.delivery.MAX_ACK)

Returns {now ms, next due ms, due by then, more, entry id, job id, due ms, attempt, body,
reserved, ...} (6 fields per job; none while the partition is paused).  more is 1 when the
call stopped at MAX_SKIPPED dropped entries or MAX_PASSES reads with fewer than ARGV[3] jobs
and entries left, else 0.  next due is the partition's earliest waiting job's due time after
the call when it was asked to promote and could (-1: none waits), else -2 (paused, lanes on,
or not asked).  due by then is how many waiting jobs are due by next due + ARGV[5] (one
ZCOUNT): what the worker's next read of the partition will find, so it asks for that many at
once rather than reading a sticky run (shardq/store/sticky.py) in two or three calls; 0 when
none waits, -1 when next due is not known.  reserved is 1 for a job a rate limit deferred to a
start it reserved for it (envelope state L, lua/defer-4.lua): the worker runs it without asking
the limit again; else 0.
Key types (the steady state's one call per job: a key-type check costs about as much as a
command): a key this call reads before its first write (the control hash, the due set, the
errors hash when acks ride) is checked by that read, and the ready stream by the first write
itself, under pcall; the jobs hash and the dead stream, first touched after a write, keep a
TYPE.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua
--@include acks.lua
--@include lanes.lua
--@include promote.lua

-- At most, one call reads past this many entries without a job (cancelled, malformed), in at
-- most this many reads (see the header): a worker reading one job at a time drops 16 a call.
local MAX_SKIPPED = 100
local MAX_PASSES = 16

local n_text = string.format('%d', n)
local paused, lanes, wrong_ctl = partition_flags(KEYS[8], KEYS[5])
if wrong_ctl then return wrong_ctl end
-- Lanes turned off ('2'): the lane is read while it still holds jobs (it exists).  Nobody but
-- the operator writes the flag, so the worker does not drop it: one EXISTS per call until the
-- operator's next `lanes --off` finds the lane empty (lua/lanes-3.lua).
if lanes == '2' and redis.call('EXISTS', KEYS[6]) == 0 then lanes = false end
local promote = ARGV[4] == '1' and not lanes and not paused
local acks = #ARGV > 5
-- Key types, before the first write (see the header): reads that double as checks first.
local errors_len
if acks then
  errors_len = redis.pcall('HLEN', KEYS[4])
  if type(errors_len) == 'table' then return refused(KEYS[4], 'hash', errors_len) end
end
local spec
if lanes then
  spec = {KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'hash', KEYS[6], 'zset',
    KEYS[7], 'hash'}
elseif acks then
  spec = {KEYS[2], 'hash', KEYS[3], 'stream'}
else
  spec = {KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'hash'}
end
local wrong = wrong_type(spec)
if wrong then return wrong end
local now = now_ms()
local batch
if promote then
  local refused_due
  batch, refused_due = due_now(KEYS[9], string.format('%d', now), n_text)
  if refused_due then return refused_due end
end
-- Writes from here.  The first command on the ready stream (XACK, XADD or XREADGROUP) is
-- its type check: refused, it has written nothing.
if acks then
  local _, refused_ready = ack_entries(KEYS[1], KEYS[2], KEYS[4], KEYS[5], ARGV[1], 6, errors_len)
  if refused_ready then return refused_ready end
end
local out = {now, -2, -1, 0}
-- A paused partition (pause-2.lua) delivers nothing; resuming publishes the ready hint.
if paused then return out end
-- The compact jobs this call promotes, {entry id, job id, body}: their envelopes are written
-- below, once (move_due).
local held
if promote then
  held = {}
  local moved, refused_ready = move_due(batch, KEYS[9], KEYS[1], KEYS[2], KEYS[5], 'HSET', held)
  if moved == nil then return refused_ready end
  out[2] = head_ms(KEYS[9])
  out[3] = 0
  if out[2] >= 0 then
    out[3] = redis.call('ZCOUNT', KEYS[9], '-inf', string.format('%d', out[2] + horizon))
  end
end
local r = redis.pcall('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', n_text, 'STREAMS',
  KEYS[1], '>')
if type(r) == 'table' and r['err'] then
  -- Refused (no group: the stream was deleted and the XADDs above made it again without
  -- one; the worker makes the group, from the start): what this call promoted waits, with
  -- its envelope, for the next read.
  if held then park_held(KEYS[2], held) end
  return refused(KEYS[1], 'stream', r)
end
local entries = r and r[1][2] or {}
-- Entry id -> index in held of the compact jobs promoted above.
local fresh
if held and #held > 0 then
  fresh = {}
  for i, h in ipairs(held) do fresh[h[1]] = i end
end
local dead_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}

-- Reads go on past entries that hold no job (voided: cancelled after promotion, or malformed)
-- until n jobs, the end of the stream and lane, MAX_SKIPPED of them or MAX_PASSES reads: a
-- run of cancelled entries costs the jobs behind it neither an empty reply nor the worker's
-- idle wait.  A read after the first happens only when one dropped something (the steady
-- state reads once).
local want, jobs, skipped, voided, exhausted, passes = n, 0, 0, 0, false, 0
while true do
  passes = passes + 1
  if lanes and #entries < want then
    local laned = lane_pop(KEYS[6], KEYS[7], want - #entries)
    if #laned > 0 then
      for i = 1, #laned, 2 do
        redis.call('XADD', KEYS[1], '*', 'j', laned[i], 'd', laned[i + 1])
      end
      local more = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT',
        string.format('%d', want - #entries), 'STREAMS', KEYS[1], '>')
      if more then
        for _, entry in ipairs(more[1][2]) do entries[#entries + 1] = entry end
      end
    end
  end
  for _, entry in ipairs(entries) do
    local eid, f = entry[1], entry[2]
    local id, due = ready_fields(f)
    local h = fresh and fresh[eid]
    if h then
      -- Promoted by this call, a compact job: attempt 0 until now, its body at hand.
      local job = held[h]
      held[h] = false
      redis.call('HSET', KEYS[2], job[2], 'A1|' .. job[3])
      out[#out + 1] = eid
      out[#out + 1] = job[2]
      out[#out + 1] = finite_due(due)
      out[#out + 1] = 1
      out[#out + 1] = job[3]
      out[#out + 1] = 0
      jobs = jobs + 1
    else
      local v = id and redis.call('HGET', KEYS[2], id)
      local state, attempt, body
      if v then state, attempt, body = split_envelope(v) end
      if drop_unrunnable(dead_keys, KEYS[1], ARGV[1], eid, f, id, v, state, attempt, body,
          now) then
        skipped = skipped + 1
        if id and not v then voided = voided + 1 end
      else
        attempt = attempt + 1
        redis.call('HSET', KEYS[2], id, string.format('A%d|', attempt) .. body)
        out[#out + 1] = eid
        out[#out + 1] = id
        out[#out + 1] = finite_due(due)
        out[#out + 1] = attempt
        out[#out + 1] = body
        out[#out + 1] = (state == 'L') and 1 or 0
        jobs = jobs + 1
      end
    end
  end
  -- Fewer than asked for: the stream (and the lane) had no more.
  if #entries < want then
    exhausted = true
    break
  end
  want = n - jobs
  if want == 0 or skipped >= MAX_SKIPPED or passes >= MAX_PASSES then break end
  entries = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT',
    string.format('%d', want), 'STREAMS', KEYS[1], '>')
  entries = entries and entries[1][2] or {}
end
if voided > 0 then
  -- Cancelled entries read: no longer waiting (partition-stats subtracts the rest).  Read to
  -- the end, none can be left: the count starts again from 0, whatever it said.
  if exhausted then
    redis.pcall('HDEL', KEYS[5], 'voided')
  else
    count(KEYS[5], 'voided', -voided)
  end
end
-- Stopped at a bound with entries left: the worker reads again at once.
if not exhausted and jobs < n then out[4] = 1 end
-- Compact jobs promoted but not read by this call (older entries came first): waiting.
if held then park_held(KEYS[2], held) end
return out
