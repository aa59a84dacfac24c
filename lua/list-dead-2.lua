--[[ list-dead: one page of a partition's dead letters, oldest first, with each job's envelope.

Bounded: one XRANGE of at most ARGV[2] entries and one HGET per entry.

KEYS[1] dead     stream  dead letters
KEYS[2] jobs     hash    job id -> envelope

ARGV[1] cursor: the page starts after this entry id ('' for the oldest)
ARGV[2] most entries in the page        number 1..1000 as n

Returns {now ms, entry id, {fields...}, envelope or false, ...} (3 fields per entry; a letter
whose job was replayed, purged or run again has an envelope that is not dead, or none)
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash'})
if wrong then return wrong end
local out = {now_ms()}
local from = ARGV[1] == '' and '-' or '(' .. ARGV[1]
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', n)) do
  local id
  for i = 1, #entry[2], 2 do
    if entry[2][i] == 'j' then id = entry[2][i + 1] end
  end
  out[#out + 1] = entry[1]
  out[#out + 1] = entry[2]
  out[#out + 1] = id and redis.call('HGET', KEYS[2], id) or false
end
return out
