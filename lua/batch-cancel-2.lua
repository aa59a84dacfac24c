--[[ batch-cancel: mark a batch or chain cancelled: none of its callbacks will fire, nor a chain's
later steps; its children still counted as they end (a parent batch is told once all have).

The caller then cancels the waiting children by id and reports them (lua/batch-report-2.lua,
'cancelled'): shardq.plans.workflows.cancel_batch, safe to run again.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children

ARGV[1] the batch id (for the error replies)

Returns
  {1, total, kind, state, n}          cancelled now: its state before; n the steps of a chain
                                      never enqueued, counted cancelled here (0 for a batch)
  {2, total, kind, state}             it had already ended or was cancelled: unchanged
  {-18, batch id}                     E_BATCH_NOT_FOUND: never created, or expired

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include now.lua
--@include checks.lua
--@include batch.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local r = redis.call('HMGET', KEYS[1], 'state', 'total', 'kind')
if not r[1] then return {-18, ARGV[1]} end
if r[1] ~= 'open' and r[1] ~= 'running' then return {2, r[2], r[3], r[1]} end
local now = now_ms()
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'cancelled_at', now)
if r[1] == 'open' then redis.call('HSET', KEYS[1], 'sealed', now) end
-- Nothing but the parent report is left to fire (callbacks and later steps never run).
local keep = {}
for name in string.gmatch(redis.call('HGET', KEYS[1], 'fires') or '', '%S+') do
  if name == 'parent' then keep[#keep + 1] = name end
end
redis.call('HSET', KEYS[1], 'fires', table.concat(keep, ' '))
local never = 0
if r[3] == 'chain' then
  -- The steps not yet enqueued never will be: counted cancelled now, so the chain ends once
  -- its running step (if any) ends.
  local ended = (tonumber(redis.call('HGET', KEYS[1], 'ok')) or 0) +
    (tonumber(redis.call('HGET', KEYS[1], 'dead')) or 0) +
    (tonumber(redis.call('HGET', KEYS[1], 'cancelled')) or 0)
  local total = tonumber(r[2]) or 0
  local running = ended < total and 1 or 0
  never = total - ended - running
  redis.call('HINCRBY', KEYS[1], 'cancelled', never)
end
end_if_done(KEYS, now)
expire_when_settled(KEYS)
return {1, r[2], r[3], r[1], never}
