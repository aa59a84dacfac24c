--[[ progress: record a running job's progress (job.progress in a handler).

Written only while the job is running (its envelope's state is A): a report that arrives after
the job completed, failed or was cancelled writes nothing, so no progress outlives its job by
more than the key's expiry.  The worker coalesces a handler's reports (at most one call per
job per shardq.worker.progress.PROGRESS_INTERVAL, the latest value): a chatty handler cannot
flood Redis.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] progress string  the job's last progress, '<ms>|<JSON>', expiring ARGV[3] after this

ARGV[1] job id
ARGV[2] the progress, JSON: 1..MAX_PROGRESS_BYTES bytes (the worker checks it first:
        ProgressError in the handler)
ARGV[3] expiry ms

Returns 1 when written, 0 when the job is not running (nothing written).
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.
]]
--@include now.lua
--@include checks.lua

local ttl, bad = arg_number(3, 1, 86400000)
if bad then return bad end
if #ARGV[2] == 0 or #ARGV[2] > MAX_PROGRESS_BYTES then
  return {-11, 2, 'a progress of ' .. #ARGV[2] .. ' bytes', 1, MAX_PROGRESS_BYTES}
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'A' then return 0 end
redis.call('SET', KEYS[2], now_ms() .. '|' .. ARGV[2], 'PX', math.floor(ttl))
return 1
