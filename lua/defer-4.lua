--[[ defer: put fetched jobs back in the due set until a given time, without using an attempt.

A worker defers a job its rate limit has no room for (shardq.limits): the fetch counted an
attempt and marked it active; both are undone, the ready entry is settled, and the job waits
in the due set for the time the limiter gave it, so no worker spins on it meanwhile.  Its
envelope state becomes L: that start is reserved for it, and fetch tells the worker so (the job
then runs without asking the limit again, which would reserve a second start).

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[4] stats    hash    counters

ARGV[1] consumer group
ARGV[2] due-hint channel (sharded pub/sub) to wake the dispatcher when the head moves earlier
ARGV[3..] per job, at least one         groups of 3, at least 1
ARGV[i]   entry id
ARGV[i+1] job id
ARGV[i+2] due ms (Redis clock)          number 0..1e15
Max ARGV: 3002  = 2 + 3 per job: at most 1000 jobs (shardq.store.limits.MAX_DEFER)

Returns
  {deferred}   how many were put back; an entry no longer pending (reclaimed and settled by
               another worker) or whose job was cancelled is skipped (a cancelled job's entry
               is settled)

Flags: allow-oom  (runs when Redis is at maxmemory: it keeps a full Redis draining)
]]
--@include envelope.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'zset'})
if wrong then return wrong end

local deferred = 0
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
for i = 3, #ARGV, 3 do
  local eid, id, due = ARGV[i], ARGV[i + 1], math.floor(tonumber(ARGV[i + 2]))
  if redis.call('XPENDING', KEYS[1], ARGV[1], eid, eid, 1)[1] then
    local v = redis.call('HGET', KEYS[2], id)
    local state, attempt, body
    if v then state, attempt, body = split_envelope(v) end
    if state then
      -- An attempt that is not a whole number (written since the fetch read it) starts again
      -- at 0: counted from there, it runs out like any other.
      attempt = attempt or 0
      if attempt > 0 then attempt = attempt - 1 end
      redis.call('HSET', KEYS[2], id, 'L' .. attempt .. '|' .. body)
      redis.call('ZADD', KEYS[3], due, id)
      deferred = deferred + 1
    end
    redis.call('XACK', KEYS[1], ARGV[1], eid)
    redis.call('XDEL', KEYS[1], eid)
  end
end
if deferred > 0 then
  count(KEYS[4], 'deferred', deferred)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if first[1] ~= head then redis.call('SPUBLISH', ARGV[2], first[2]) end
end
return {deferred}
