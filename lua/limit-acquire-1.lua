--[[ limit-acquire: take (or keep) running slots of one concurrency limit for jobs about to run.

The holders are a sorted set of job ids scored by when their hold expires (Redis clock).  A
worker renews the holds of its running jobs with every heartbeat (asking again for a job it
holds renews it), and gives them back when the handler ends (limit-release-1); a worker that
dies stops renewing, so its slots come back within the hold time, as its deliveries do.

KEYS[1] holders  zset    job id scored by hold expiry ms

ARGV[1] most holders at once                            number 1..1000000 as most
ARGV[2] hold ms: how long a hold lasts without renewal  number 100..86400000 as hold
ARGV[3..] job ids asking                                each name, at least 1
Max ARGV: 1002  = 2 + at most 1000 jobs (shardq.worker.limiter.MAX_TAKE)

Returns
  {now ms, g1, ..., gn}              gi = 1: job i holds a slot now (new or renewed); 0: full

Flags: allow-oom  (keeps a full Redis draining: one small set per limit, bounded by its size)
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'zset'})
if wrong then return wrong end
local now = now_ms()
-- Holds nobody renewed in time (a worker that died): their slots come back.  So do holds
-- expiring later than any hold can (86400000 ms, ARGV[2]'s bound): +inf, or a huge score,
-- written by hand would hold a slot for ever.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (now + 86400000), '+inf')
local held = redis.call('ZCARD', KEYS[1])
local expiry = now + math.floor(hold)
local out = {now}
for i = 3, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], expiry, ARGV[i])
    out[#out + 1] = 1
  elseif held < most then
    redis.call('ZADD', KEYS[1], expiry, ARGV[i])
    held = held + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if held > 0 then redis.call('PEXPIRE', KEYS[1], math.floor(hold) + 1000) end
return out
