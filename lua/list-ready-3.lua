--[[ list-ready: one page of a partition's ready jobs no worker has read yet, oldest first.

Ready entries after the consumer group's last delivered id (acknowledged entries stay in the
stream until the dispatcher trims them, so the stream's start is not the ready set's), then
the jobs waiting in the lane (lanes on: lua/includes/lanes.lua) in the order fetch takes them.
A lane job's entry id is synthetic, '9999999999999-<place in the lane>', so that it sorts after
every stream entry and pages on from a cursor like one (places move as workers fetch: a page is
a snapshot, as for the stream).
Bounded: XINFO GROUPS, one XRANGE and one ZRANGE of at most ARGV[3] entries.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] lane     zset    due jobs waiting for fetch (lanes on)

ARGV[1] consumer group
ARGV[2] cursor: the page starts after this entry id ('' for the first ready entry)
ARGV[3] most jobs in the page           number 1..1000 as n

Returns {now ms, entry id, job id or false, due ms or false, envelope or false, ...}
  (4 fields per entry; a job cancelled after promotion has no envelope: workers drop it)
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'zset'})
if wrong then return wrong end
local out = {now_ms()}
local LANE_MS = 9999999999999
local lane_from = 0
local after_ms, after_seq = string.match(ARGV[2], '^(%d+)-(%d+)$')
if tonumber(after_ms) == LANE_MS then lane_from = tonumber(after_seq) end
local function lane_page(left)
  if left <= 0 then return end
  local members = redis.call('ZRANGE', KEYS[3], lane_from, lane_from + left - 1)
  for i, member in ipairs(members) do
    local due, _, id = string.match(member, '^(%S*) (%S*) (.*)$')
    out[#out + 1] = LANE_MS .. '-' .. (lane_from + i)
    out[#out + 1] = id or false
    out[#out + 1] = due or false
    out[#out + 1] = id and redis.call('HGET', KEYS[2], id) or false
  end
end
if lane_from > 0 or redis.call('EXISTS', KEYS[1]) == 0 then
  lane_page(n)
  return out
end
local delivered = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  if info['name'] == ARGV[1] then delivered = info['last-delivered-id'] end
end
-- Stream ids compare as (ms, seq); both cursors are ids this stream handed out.
local function id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end
local from = delivered or '0-0'
if ARGV[2] ~= '' then
  local a_ms, a_seq = id_parts(ARGV[2])
  local d_ms, d_seq = id_parts(from)
  if a_ms > d_ms or (a_ms == d_ms and a_seq > d_seq) then from = ARGV[2] end
end
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '(' .. from, '+', 'COUNT', n)) do
  local id, due = ready_fields(entry[2])
  out[#out + 1] = entry[1]
  out[#out + 1] = id or false
  out[#out + 1] = due or false
  out[#out + 1] = id and redis.call('HGET', KEYS[2], id) or false
end
lane_page(n - (#out - 1) / 4)
return out
