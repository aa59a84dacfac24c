--[[ progress: record a running job's progress (job.progress in a handler).

Written only while the job is running (its envelope's state is A): a report that arrives after
the job completed, failed or was cancelled writes nothing, so no progress outlives its job by
more than the key's expiry.  The worker coalesces a handler's reports (at most one call per
job per shardq.worker.progress.PROGRESS_INTERVAL, the latest value): a chatty handler cannot
flood Redis.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] progress string  the job's last progress, '<ms>|<JSON>', expiring ARGV[3] after this

ARGV[1] job id
ARGV[2] the progress, JSON (the worker checks it first: ProgressError  bytes 1..MAX_PROGRESS_BYTES
        in the handler)
ARGV[3] expiry ms                                                      number 1..86400000 as ttl

Returns 1 when written, 0 when the job is not running (nothing written).
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'A' then return 0 end
redis.call('SET', KEYS[2], now_ms() .. '|' .. ARGV[2], 'PX', math.floor(ttl))
return 1
