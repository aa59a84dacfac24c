--[[ schedule-read: periodic schedules of one partition with their state, on the Redis clock.

KEYS[1] schedules  hash    schedule name -> definition JSON
KEYS[2] next       zset    active schedule name scored by next tick ms
KEYS[3] state      hash    schedule name -> 'last fire|last tick|fires|misfires|paused'

ARGV[1] 'get' (ARGV[2] is a name), 'scan' (ARGV[2] is an HSCAN cursor)  one of get|scan|due
        or 'due' (the schedules whose next tick is at or before now, earliest first)
ARGV[2] name, cursor or ''
ARGV[3] most schedules to return (scan: the HSCAN COUNT hint)           number 1..1000 as count

Returns {now ms, next cursor ('0' when done), earliest next tick ms or -1,
         then 4 per schedule: name, definition (false: none, 'due' only), next tick ms or
         false, state or false}
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua
--@include periodic.lua

local mode = ARGV[1]
-- Checked here: what ARGV[2] must be depends on the mode.
if mode == 'scan' and not string.match(ARGV[2], '^%d+$') then
  return {-11, 2, ARGV[2], '0', '18446744073709551615'}
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
if wrong then return wrong end

local now = now_ms()
local out = {now, '0', head_ms(KEYS[2])}
local function add(name, score)
  local def = redis.call('HGET', KEYS[1], name)
  -- 'due' also returns a next-tick entry without a definition (the fire step drops it).
  if not def and mode ~= 'due' then return end
  out[#out + 1] = name
  out[#out + 1] = def
  score = score or redis.call('ZSCORE', KEYS[2], name)
  out[#out + 1] = score and score_ms(score)
  out[#out + 1] = redis.call('HGET', KEYS[3], name)
end

if mode == 'get' then
  add(ARGV[2], nil)
elseif mode == 'scan' then
  local page = redis.call('HSCAN', KEYS[1], ARGV[2], 'COUNT', count)
  out[2] = page[1]
  for i = 1, #page[2], 2 do add(page[2][i], nil) end
else
  local due = redis.call('ZRANGE', KEYS[2], '-inf', now, 'BYSCORE', 'LIMIT', 0, count, 'WITHSCORES')
  for i = 1, #due, 2 do add(due[i], due[i + 1]) end
end
return out
