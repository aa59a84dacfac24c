--[[ limit-take: reserve start times for jobs under one rate limit (GCRA, virtual scheduling).

The limit allows `rate` starts per period: one every T = period / rate ms, and up to `burst`
at once after an idle spell.  Each asking job gets a start time: now when the limit has room,
else the time its reserved slot opens.  A reservation counts at once, so a job that is
deferred to its time finds room then, and a backlog is spread at the limit's pace instead of
being fetched and deferred over and over.  Times are on the Redis clock.

KEYS[1] limit    string  the theoretical arrival time (ms) of the next free slot

ARGV[1] T: emission interval ms (period / rate)  number 0.000001..1e13 as t
ARGV[2] burst: starts allowed at once from idle  number 1..1000000 as burst
ARGV[3] n: jobs asking                           number 1..1000 as n

Returns
  {now ms, t1, ..., tn}              ti = 0: start now; ti > 0: the Redis ms time its slot opens

Flags: allow-oom  (keeps a full Redis draining: the key it writes is a few bytes and expires)
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string'})
if wrong then return wrong end
local now = now_ms()
-- A state that is not a finite ms time (nan, inf, text: written by hand) is an idle limit:
-- starts from now again, rather than a reply of -2^63 or a SET that fails every call.
local tat = float_of(redis.call('GET', KEYS[1]), 0, MAX_MS) or now
if tat < now then tat = now end
local slack = (math.floor(burst) - 1) * t
local out = {now}
for i = 1, math.floor(n) do
  local start = tat - slack
  if start <= now then
    out[#out + 1] = 0
  else
    out[#out + 1] = math.ceil(start)
  end
  tat = tat + t
end
-- Kept until the reservations are past: an idle limit leaves no key behind.
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
return out
