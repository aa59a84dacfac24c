--[[ dlq-purge: delete dead-lettered entries and the dead jobs they name.  The operator's (and
admin's) only (lua/includes/checks.lua operator_only).

KEYS[1] dead     stream  dead letters
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] ctl      hash    the partition's flags (its type is checked: who may write it may run this)

ARGV[1..] dead entry ids (bounded by the caller)
Max ARGV: 1000  = at most 1000 entries (shardq.inspector.BATCH, shardq.admin.DLQ_BATCH)

Returns the number of entries deleted.  A job is deleted only while it is still dead (a job
replayed meanwhile is left alone).
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include envelope.lua
--@include checks.lua

local denied = operator_only(KEYS[4], KEYS[1])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash'})
if wrong then return wrong end
local deleted = 0
for i = 1, #ARGV do
  local entry = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])[1]
  if entry then
    local id = ready_fields(entry[2])
    local v = id and redis.call('HGET', KEYS[2], id)
    if v and string.sub(v, 1, 1) == 'D' then
      redis.call('HDEL', KEYS[2], id)
      redis.call('HDEL', KEYS[3], id)
    end
    deleted = deleted + redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return deleted
