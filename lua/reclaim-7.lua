--[[ reclaim: take over deliveries whose worker is gone, or idle past the visibility timeout.

A live worker refreshes its deliveries (touch) every heartbeat, so their idle time stays short.
A delivery is taken over when its consumer is not among the live workers (ARGV[7..]) and it is
idle past ARGV[6] (a few heartbeats: the worker died, its membership expired), or when it is
idle past the visibility timeout whoever holds it (a reply lost on the way, a hung worker).
A delivery already made ARGV[5] times is a poison job: it goes to the dead stream instead of
running again.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] dead     stream  dead letters
KEYS[4] errors   hash    job id -> last error
KEYS[5] stats    hash    counters (and the flags of a queue of layout < 4: lua/includes/lanes.lua)
KEYS[6] ctl      hash    the partition's flags: 'paused' (read only)
KEYS[7] outbox   hash    workflow children's ends not yet relayed (lua/includes/outbox.lua):
        a poison child's end is written here with its dead letter

ARGV[1] consumer group
ARGV[2] consumer (worker) name taking the deliveries           name
ARGV[3] min idle ms (the visibility timeout; 30 days at most)  number 0..2592000000 as visibility
ARGV[4] max deliveries to look at in this call                 number 1..1000 as n
ARGV[5] delivery limit                                         number 1..1000 as limit
ARGV[6] orphan idle ms: a delivery of a consumer               number 0..2592000000 as orphan_idle
        not in ARGV[8..] is taken once idle this long
ARGV[7] the partition's due-hint channel: told 'o' when a poison child's end is written
ARGV[8..] live consumers (worker names whose membership has not expired)
Max ARGV: 1007  = 7 + at most 1000 live workers (shardq.store.delivery.MAX_LIVE)

Returns {now ms, entry id, job id, due ms, attempt, body, deliveries, ...} (6 fields per job;
none while the partition is paused)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua
--@include lanes.lua
--@include outbox.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'hash',
  KEYS[7], 'hash'})
if wrong then return wrong end
local paused, _, wrong_ctl = partition_flags(KEYS[6], KEYS[5])
if wrong_ctl then return wrong_ctl end
local now = now_ms()
local out = {now}
local live = {}
for i = 8, #ARGV do live[ARGV[i]] = true end
local dead_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}
if redis.call('EXISTS', KEYS[1]) == 0 then return out end
-- A paused partition (pause-2.lua) hands out no delivery, not even an abandoned one.
if paused then return out end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', math.min(visibility, orphan_idle),
  '-', '+', n)

for _, p in ipairs(pending) do
  -- (XPENDING's idle time and delivery count are integers Redis keeps itself)
  local eid, owner, idle, deliveries = p[1], p[2], tonumber(p[3]), tonumber(p[4])
  local min_idle
  if idle >= visibility then
    min_idle = visibility
  elseif not live[owner] then
    min_idle = orphan_idle
  end
  -- XCLAIM's min idle re-checks the entry, so one touched since XPENDING read it stays put.
  local entry
  if min_idle then
    entry = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], min_idle, eid)[1]
  end
  if entry then
    local id, due = ready_fields(entry[2])
    local v = id and redis.call('HGET', KEYS[2], id)
    local state, attempt, body
    if v then state, attempt, body = split_envelope(v) end
    if drop_unrunnable(dead_keys, KEYS[1], ARGV[1], eid, entry[2], id, v, state, attempt, body,
        now) then
      -- No job to run (cancelled, or malformed): settled.
    elseif deliveries >= limit then
      local reason = 'delivery limit: delivered ' .. deliveries ..
        ' times without an ack (worker crash or hang)'
      dead_letter(dead_keys, id, attempt, body, reason, now)
      local ref = workflow_ref(body)
      if ref then outbox_put(KEYS[7], ARGV[7], id, ref, 'dead', now, reason) end
      redis.call('XACK', KEYS[1], ARGV[1], eid)
      redis.call('XDEL', KEYS[1], eid)
    else
      attempt = attempt + 1
      redis.call('HSET', KEYS[2], id, 'A' .. attempt .. '|' .. body)
      bump(KEYS[5], 'reclaimed')
      out[#out + 1] = eid
      out[#out + 1] = id
      out[#out + 1] = finite_due(due)
      out[#out + 1] = attempt
      out[#out + 1] = body
      out[#out + 1] = deliveries + 1
    end
  end
end
return out
