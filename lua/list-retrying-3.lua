--[[ list-retrying: jobs that failed and wait for their next attempt, from one HSCAN step.

A job is retrying when it has a last error and is waiting again in the due set.  Bounded: one
HSCAN step with COUNT ARGV[2] (Redis may return a few more) and a ZSCORE and HGET per job.

KEYS[1] errors   hash    job id -> last error
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] due      zset    job id (or '<id> <body>', a compact job) scored by due ms

ARGV[1] HSCAN cursor ('0' to start)
ARGV[2] HSCAN COUNT                     number 1..1000 as n

Returns {now ms, next cursor ('0': done), {job id, due ms, last error, envelope, ...}}
Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua

-- A pattern, not a bound: checked here.
if not string.match(ARGV[1], '^%d+$') then return {-11, 1, ARGV[1], '0', 'an HSCAN cursor'} end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset'})
if wrong then return wrong end
local now = now_ms()
local step = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', n)
local jobs = {}
local pairs_ = step[2]
for i = 1, #pairs_, 2 do
  local id, err = pairs_[i], pairs_[i + 1]
  local due = redis.call('ZSCORE', KEYS[3], id)
  local v = redis.call('HGET', KEYS[2], id)
  -- (S waiting, or L: waiting for the start a rate limit reserved for it, also a retry)
  local letter = string.sub(v or '', 1, 1)
  if due and v and (letter == 'S' or letter == 'L') then
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = due
    jobs[#jobs + 1] = err
    jobs[#jobs + 1] = v
  end
end
return {now, step[1], jobs}
