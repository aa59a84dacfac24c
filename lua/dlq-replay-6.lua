--[[ dlq-replay: put dead-lettered jobs back in the due set, attempts reset, due now.  The
operator's (and admin's) only (lua/includes/checks.lua operator_only).

KEYS[1] dead     stream  dead letters
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[4] errors   hash    job id -> last error
KEYS[5] stats    hash    counters
KEYS[6] ctl      hash    the partition's flags (its type is checked: who may write it may run this)

ARGV[1] due-hint channel (sharded pub/sub) to wake the dispatcher
ARGV[2..] dead entry ids (bounded by the caller)
Max ARGV: 1001  = 1 + at most 1000 entries (shardq.inspector.BATCH, shardq.admin.DLQ_BATCH)

Returns {replayed, skipped}: an entry is skipped (and left in place) when it holds no job
(a malformed ready entry: purge it) or its job is no longer dead (already replayed/cancelled).
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua

local denied = operator_only(KEYS[6], KEYS[1])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'hash',
  KEYS[6], 'hash'})
if wrong then return wrong end
local now = now_ms()
local replayed, skipped = 0, 0
for i = 2, #ARGV do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  local id
  if entry then id = ready_fields(entry[2]) end
  local v = id and redis.call('HGET', KEYS[2], id)
  local state, _, body
  if v then state, _, body = split_envelope(v) end
  if state == 'D' then
    redis.call('HSET', KEYS[2], id, 'S0|' .. body)
    redis.call('ZADD', KEYS[3], now, id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('XDEL', KEYS[1], ARGV[i])
    replayed = replayed + 1
  else
    skipped = skipped + 1
  end
end
if replayed > 0 then
  count(KEYS[5], 'replayed', replayed)
  redis.call('SPUBLISH', ARGV[1], now)
end
return {replayed, skipped}
