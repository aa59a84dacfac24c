--[[ list-running: one page of a partition's jobs held by workers (delivered, not settled).

Bounded: one XPENDING of at most ARGV[3] deliveries, one XRANGE and one HGET per delivery.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope

ARGV[1] consumer group
ARGV[2] cursor: the page starts after this entry id ('' for the oldest delivery)
ARGV[3] most jobs in the page           number 1..1000 as n

Returns {now ms, entry id, job id or false, worker, idle ms, deliveries, envelope or false, ...}
  (6 fields per delivery)
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash'})
if wrong then return wrong end
local out = {now_ms()}
if redis.call('EXISTS', KEYS[1]) == 0 then return out end
local found = false
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  for i = 1, #g, 2 do
    if g[i] == 'name' and g[i + 1] == ARGV[1] then found = true end
  end
end
if not found then return out end
local from = ARGV[2] == '' and '-' or '(' .. ARGV[2]
for _, p in ipairs(redis.call('XPENDING', KEYS[1], ARGV[1], from, '+', n)) do
  local entry = redis.call('XRANGE', KEYS[1], p[1], p[1])[1]
  local id = entry and ready_fields(entry[2])
  out[#out + 1] = p[1]
  out[#out + 1] = id or false
  out[#out + 1] = p[2]
  out[#out + 1] = p[3]
  out[#out + 1] = p[4]
  out[#out + 1] = id and redis.call('HGET', KEYS[2], id) or false
end
return out
