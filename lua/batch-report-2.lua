--[[ batch-report: count children's ends in their batch, each once, and say what that calls for.

Called by the relay (shardq.dispatcher.relay) with the entries of one partition's outbox that
belong to this batch (lua/includes/outbox.lua), by a batch cancel for the children it
cancelled, and by a nested batch's end for its parent.  Each child's bit in the bitmap makes
it idempotent: a resent report (the relay died before deleting the outbox entry, a job run
twice, a replayed dead letter) counts nothing and answers the fires still to do, so a relay
that died between this call and lua/batch-fired-2.lua does them on its next try.  One call
carries every end of one relay round for this batch, so a batch whose children end together
pays one call per partition round, not one per child.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap: bit i set once child i's end was counted

ARGV[1..] four per child of the call (1 to 1000 children)  groups of 4, at least 1
ARGV[i]   the child's index (0 .. total - 1)
ARGV[i+1] how it ended: 'ok', 'dead' or 'cancelled'
ARGV[i+2] its job id (for the failure reason)
ARGV[i+3] its value: a chain step's result record (JSON) for 'ok', the error for 'dead'; or ''
          (at most MAX_RESULT_BYTES)
Max ARGV: 4000

Returns
  {1, counted, ended ms, {skipped}, name, body, extra, ...}
                                      counted: how many of the call's children were counted
                                      now (the others were counted before: resends); ended
                                      ms: when the batch ended (0 while it runs); skipped: the
                                      positions (0-based, in the call) of children no batch can
                                      count, each refused alone (the others still count): an
                                      index past the batch's children (or its bitmap's 'bits'),
                                      an outcome not listed above, a value over
                                      MAX_RESULT_BYTES (the caller drops them); then the fires
                                      still to do (lua/includes/batch.lua pending_fires)
  {0}                                 no such batch (expired after its retention, or never
                                      created): the reports are dropped

A report never grows the bitmap (lua/includes/batch.lua 'bits'), and keeps at most
MAX_RESULT_BYTES of a value: what it adds to a full Redis is bounded.

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include now.lua
--@include checks.lua
--@include batch.lua

local OUTCOMES = {ok = true, dead = true, cancelled = true}
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local r = redis.call('HMGET', KEYS[1], 'state', 'total', 'kind', 'policy', 'bits')
if not r[1] then return {0} end
local record, state, kind, policy = KEYS[1], r[1], r[3], r[4]
local total = int_of(r[2], 0, MAX_TOTAL) or 0
local last = countable(total, r[5]) - 1
local skipped, counted = {}, 0
local now
for i = 1, #ARGV, 4 do
  local index = int_of(ARGV[i], 0, last)
  if not index or not OUTCOMES[ARGV[i + 1]] or #ARGV[i + 3] > MAX_RESULT_BYTES then
    skipped[#skipped + 1] = (i - 1) / 4
  elseif redis.call('SETBIT', KEYS[2], index, 1) == 0 then
    counted = counted + 1
    local outcome, job_id, value = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    redis.call('HINCRBY', record, outcome, 1)
    if outcome ~= 'ok' and redis.call('HEXISTS', record, 'reason') == 0 then
      redis.call('HSET', record, 'reason', string.sub(job_id, 1, 200) .. ': ' ..
        (outcome == 'cancelled' and 'cancelled' or string.sub(value, 1, 500)))
    end
    if kind == 'chain' then
      if state == 'running' then
        if outcome == 'ok' and index + 1 < total then
          redis.call('HSET', record, 'pv', value)
          add_fire(record, 'step:' .. (index + 1))
        elseif outcome ~= 'ok' then
          -- A step that did not complete stops the chain: the steps after it never run, and
          -- count as cancelled so the chain ends now.
          redis.call('HINCRBY', record, 'cancelled', total - index - 1)
          state = 'failed'
          redis.call('HSET', record, 'state', state)
          add_callback(record, 'failure')
        end
      end
    elseif outcome ~= 'ok' and (state == 'open' or state == 'running') and policy == 'fail' then
      -- Policy 'fail': the first child that does not complete fails the batch now.
      state = 'failed'
      redis.call('HSET', record, 'state', state)
      add_callback(record, 'failure')
    end
  end
end
if counted > 0 then
  now = now_ms()
  end_if_done(KEYS, now)
  expire_when_settled(KEYS)
end
local out = {1, counted, tonumber(redis.call('HGET', record, 'ended')) or 0, skipped}
for _, v in ipairs(pending_fires(record)) do out[#out + 1] = v end
return out
