--[[ promote: move due jobs of one partition from the due set to the ready stream (to the lane,
in a partition with lanes on: lua/includes/lanes.lua).

One job at a time, at most ARGV[2] per call so a call stays well under a millisecond of Redis
time; due is judged on the Redis clock.  The payload never leaves Redis (with lanes on, the
envelope is read here for the job's priority and tenant prefix).

KEYS[1] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[2] ready    stream  due jobs
KEYS[3] lease    string  '<token>:<owner>' of the partition's dispatcher
KEYS[4] stats    hash    counters (and the flags of a queue of layout < 4: lua/includes/lanes.lua)
KEYS[5] jobs     hash    job id -> envelope (read with lanes on; a compact job's is written)
KEYS[6] lane     zset    due jobs waiting for fetch, by fair-queueing score (lanes on)
KEYS[7] vtime    hash    virtual time and per-flow last score of the lane (lanes on)
KEYS[8] ctl      hash    the partition's flags, 'paused' and 'lanes' (read only)

ARGV[1] fencing token of the caller
ARGV[2] max jobs to move in this call (K)                 number 1..1000 as k
ARGV[3] ready-hint channel (sharded pub/sub) to wake workers when jobs moved; the message
        is the id of the last entry added to the ready stream ('1' when they went to the
        lane), so a worker that has read past it knows the hint is no news
ARGV[4] lease ttl ms: a successful promote also extends   number 100..86400000 as lease_ms
        the caller's lease, so a busy partition needs no separate renewal call

Returns
  {moved, next due ms or -1, now ms, lanes, oldest moved due ms or -1}
                                       next due is the earliest remaining job's due time
                                       ({0, -1, now, lanes, -1} while the partition is paused);
                                       lanes 1 when the partition has lanes on (workers'
                                       reads do not promote it: lua/fetch-9.lua); the oldest
                                       moved job's due time says how late it was moved
  {-1, token, lease}                    E_FENCED: the caller's token is not current

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include lease.lua
--@include checks.lua
--@include lanes.lua
--@include compact.lua
--@include promote.lua

local paused, lanes, wrong_ctl = partition_flags(KEYS[8], KEYS[4])
if wrong_ctl then return wrong_ctl end
lanes = lanes == '1'
local spec = {KEYS[1], 'zset', KEYS[2], 'stream', KEYS[3], 'string', KEYS[5], 'hash'}
if lanes then
  for _, kv in ipairs({KEYS[6], 'zset', KEYS[7], 'hash'}) do spec[#spec + 1] = kv end
end
local wrong = wrong_type(spec)
if wrong then return wrong end
local stale = fenced(KEYS[3], ARGV[1])
if stale then return stale end

redis.call('PEXPIRE', KEYS[3], lease_ms)
local now = now_ms()
-- A paused partition (pause-2.lua) promotes nothing; "nothing due" makes the dispatcher wait
-- for the hint that resuming publishes.
if paused then return {0, -1, now, lanes and 1 or 0, -1} end
local moved, last_entry, oldest
if lanes then
  local batch = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, k, 'WITHSCORES')
  moved = #batch / 2
  oldest = batch[2]
  -- A compact job (lua/includes/compact.lua) gets its envelope in the jobs hash now: from here
  -- on it is like any other.  HSETNX: its id has no entry (enqueue checked), and the
  -- dispatcher's ACL grants no HSET.
  local items = {}
  for i = 1, #batch, 2 do
    local id, body = split_member(batch[i])
    local v
    if body then
      v = 'S0|' .. body
      redis.call('HSETNX', KEYS[5], id, v)
    else
      v = redis.call('HGET', KEYS[5], id)
    end
    items[#items + 1] = id
    items[#items + 1] = v and envelope_flow(v) or 'n'
    items[#items + 1] = batch[i + 1]
  end
  lane_add(KEYS[6], KEYS[7], items)
  if moved > 0 then
    redis.call('ZREMRANGEBYRANK', KEYS[1], 0, moved - 1)
    count(KEYS[4], 'promoted', moved)
  end
  last_entry = '1'
else
  -- The keys' types are checked above: neither call can be refused here.
  local batch = due_now(KEYS[1], string.format('%d', now), string.format('%d', k))
  moved, last_entry, oldest = move_due(batch, KEYS[1], KEYS[2], KEYS[5], KEYS[4], 'HSETNX')
end
if moved > 0 then redis.call('SPUBLISH', ARGV[3], last_entry) end
return {moved, head_ms(KEYS[1]), now, lanes and 1 or 0, oldest and score_ms(oldest) or -1}
