--[[ reclaim: take over deliveries idle past the visibility timeout (their worker died or hung).

A live worker refreshes its deliveries (touch), so only abandoned ones get this idle.  A delivery
already made ARGV[5] times is a poison job: it goes to the dead stream instead of running again.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] dead     stream  dead letters
KEYS[4] errors   hash    job id -> last error
KEYS[5] stats    hash    counters

ARGV[1] consumer group
ARGV[2] consumer (worker) name taking the deliveries
ARGV[3] min idle ms (the visibility timeout)
ARGV[4] max deliveries to look at in this call
ARGV[5] delivery limit

Returns {now ms, entry id, job id, due ms, attempt, body, deliveries, ...} (6 fields per job)
]]
--@include now.lua
--@include envelope.lua

local now = now_ms()
local out = {now}
local limit = tonumber(ARGV[5])
local dead_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5]}
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', tonumber(ARGV[3]), '-', '+',
  tonumber(ARGV[4]))

for _, p in ipairs(pending) do
  local eid, deliveries = p[1], tonumber(p[4])
  local claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3]), eid)
  local entry = claimed[1]
  if entry then
    local id, due = ready_fields(entry[2])
    local v = id and redis.call('HGET', KEYS[2], id)
    local state, attempt, body
    if v then state, attempt, body = split_envelope(v) end
    if not state then
      -- No job (cancelled, or malformed): nothing to run.
      redis.call('XACK', KEYS[1], ARGV[1], eid)
      redis.call('XDEL', KEYS[1], eid)
    elseif deliveries >= limit then
      dead_letter(dead_keys, id, attempt, body,
        'delivery limit: delivered ' .. deliveries .. ' times without an ack (worker crash or hang)',
        now)
      redis.call('XACK', KEYS[1], ARGV[1], eid)
      redis.call('XDEL', KEYS[1], eid)
    else
      attempt = attempt + 1
      redis.call('HSET', KEYS[2], id, 'A' .. attempt .. '|' .. body)
      redis.call('HINCRBY', KEYS[5], 'reclaimed', 1)
      out[#out + 1] = eid
      out[#out + 1] = id
      out[#out + 1] = due or ''
      out[#out + 1] = attempt
      out[#out + 1] = body
      out[#out + 1] = deliveries + 1
    end
  end
end
return out
