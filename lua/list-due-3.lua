--[[ list-due: one page of a partition's due set in due order, after a cursor: its scheduled jobs
and its retrying ones (a last error in the errors hash tells them apart, as get-6.lua does).

Bounded whatever the backlog: the page starts at a rank found by ZCOUNT and a binary search
among the members of the cursor's own score (O(log^2 n)), then reads at most ARGV[4] members.

KEYS[1] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error

ARGV[1] cursor score: the page starts after (ARGV[1], ARGV[2]) in  number -1e18..1e18
        (score, job id) order
ARGV[2] cursor job id, or '' to start at the first member scored >= ARGV[1]
ARGV[3] highest due ms to list (inclusive)                         number -1e18..1e18 as upto
ARGV[4] most jobs in the page                                      number 1..1000 as n

Returns {now ms, due ms, job id, envelope or false, last error or false, ...} (4 fields per job:
a job with a last error is retrying)
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua
--@include compact.lua

local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash'})
if wrong then return wrong end

local out = {now_ms()}
local start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
if ARGV[2] ~= '' then
  -- Members of the cursor's score sit at ranks [start, start + ties); skip those <= member.
  local lo, hi = start, start + redis.call('ZCOUNT', KEYS[1], ARGV[1], ARGV[1])
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', KEYS[1], mid, mid)[1]
    if not bytes_less(ARGV[2], (split_member(m))) then lo = mid + 1 else hi = mid end
  end
  start = lo
end
local page = redis.call('ZRANGE', KEYS[1], start, start + n - 1, 'WITHSCORES')
for i = 1, #page, 2 do
  -- (a score is a double, never nan; +-inf compare as they should.  It is replied as stored:
  -- the next page's cursor must be the member's own score.)
  if tonumber(page[i + 1]) > upto then break end
  local id, body = split_member(page[i])
  out[#out + 1] = page[i + 1]
  out[#out + 1] = id
  if body then
    -- A compact member never failed: it has no envelope and no last error.
    out[#out + 1] = 'S0|' .. body
    out[#out + 1] = false
  else
    out[#out + 1] = redis.call('HGET', KEYS[2], id)
    out[#out + 1] = redis.call('HGET', KEYS[3], id)
  end
end
return out
