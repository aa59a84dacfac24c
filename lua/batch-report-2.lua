--[[ batch-report: count one child's end in its batch, once, and say what that calls for.

Called by the relay (shardq.dispatcher.relay) for each outbox entry of a child's partition
(lua/includes/outbox.lua), and by a batch cancel for the children it cancelled.  The child's
bit in the bitmap makes it idempotent: a resent report (the relay died before deleting the
outbox entry, a job run twice, a replayed dead letter) counts nothing, and answers the fires
still to do, so a relay that died between this call and lua/batch-fired-2.lua does them on its
next try.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap: bit i set once child i's end was counted

ARGV[1] the child's index (0 .. total - 1)
ARGV[2] how it ended: 'ok', 'dead' or 'cancelled'
ARGV[3] its job id (for the failure reason)
ARGV[4] its value: a chain step's result record (JSON) for 'ok', the error for 'dead'; or ''

Returns
  {1, name, body, extra, ...}         counted now; then the fires to do (pending_fires)
  {2, name, body, extra, ...}         counted before (a resend): nothing changed; the fires still
                                      to do
  {0}                                 no such batch (expired after its retention, or never
                                      created): the report is dropped
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT (an index past the batch's children)
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include now.lua
--@include checks.lua
--@include batch.lua

local outcome = ARGV[2]
if outcome ~= 'ok' and outcome ~= 'dead' and outcome ~= 'cancelled' then
  return {-11, 2, outcome, 'ok', 'cancelled'}
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local r = redis.call('HMGET', KEYS[1], 'state', 'total', 'kind', 'policy')
if not r[1] then return {0} end
local total = tonumber(r[2]) or 0
local index, bad = arg_number(1, 0, total - 1)
if bad then return bad end
local out
if redis.call('SETBIT', KEYS[2], index, 1) == 1 then
  out = {2}
else
  out = {1}
  local now = now_ms()
  local record, state, kind = KEYS[1], r[1], r[3]
  redis.call('HINCRBY', record, outcome, 1)
  if outcome ~= 'ok' and redis.call('HEXISTS', record, 'reason') == 0 then
    redis.call('HSET', record, 'reason', ARGV[3] .. ': ' .. (outcome == 'cancelled' and
      'cancelled' or string.sub(ARGV[4], 1, 500)))
  end
  if kind == 'chain' then
    if state == 'running' then
      if outcome == 'ok' and index + 1 < total then
        redis.call('HSET', record, 'pv', ARGV[4])
        add_fire(record, 'step:' .. (index + 1))
      elseif outcome ~= 'ok' then
        -- A step that did not complete stops the chain: the steps after it never run, and
        -- count as cancelled so the chain ends now.
        redis.call('HINCRBY', record, 'cancelled', total - index - 1)
        redis.call('HSET', record, 'state', 'failed')
        add_callback(record, 'failure')
      end
    end
  elseif outcome ~= 'ok' and state ~= 'failed' and state ~= 'cancelled'
    and r[4] == 'fail' then
    -- Policy 'fail': the first child that does not complete fails the batch now.
    redis.call('HSET', record, 'state', 'failed')
    add_callback(record, 'failure')
  end
  end_if_done(KEYS, now)
  expire_when_settled(KEYS)
end
for _, v in ipairs(pending_fires(KEYS[1])) do out[#out + 1] = v end
return out
