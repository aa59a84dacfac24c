--@include checks.lua
-- A batch or chain (shardq.plans.workflows) lives on its own slot: its record hash KEYS[1]
-- ({sq:<queue>:batch:<id>}:batch) and its bitmap KEYS[2] (:seen, one bit per child index).
-- Record fields:
--   kind      'batch' | 'chain'
--   state     'open' (children may be added) | 'running' (sealed) | 'succeeded' | 'failed' |
--             'cancelled'
--   total, ok, dead, cancelled   children, and how many ended each way (exact: a child is
--             counted when its bit is first set)
--   bits      children whose bits the bitmap was allocated for (by batch-open-2 and
--             batch-add-2, which Redis refuses at maxmemory): the settling scripts, which run
--             at maxmemory (allow-oom), set no bit past it, so they never grow the bitmap.  A
--             record without it was opened by an older release; its bitmap grows up to total
--   policy    what a dead child does: 'fail' (the batch fails at once), 'continue' (it fails
--             once every child ended), 'ignore' (counted, but the batch may still succeed)
--   created, sealed, ended       ms (Redis clock)
--   retention ms the record is kept once it ended and its callbacks were enqueued
--   parent    '<batch id>|<index>' of the batch this one is a child of, or ''
--   reason    the first failure, '<job id>: <error>'
--   cb:success, cb:complete, cb:failure   the callback jobs' bodies (JSON, as enqueued)
--   step:<i>  a chain's step bodies (step 0 is enqueued by the producer)
--   pv        a chain's last step's return value (the record JSON), for the next step
--   fires     the space-separated names of what the relay still has to enqueue or report:
--             'success', 'complete', 'failure', 'step:<i>', 'parent' (lua/batch-fired-2.lua)

-- countable(total, bits): how many child indexes a report may set bits for (see 'bits').
local function countable(total, bits)
  local allocated = int_of(bits, 0, MAX_TOTAL)
  if bits and not allocated then return 0 end
  if allocated and allocated < total then return allocated end
  return total
end

-- fire(record, name): add a fire to do.
local function add_fire(record, name)
  local fires = redis.call('HGET', record, 'fires') or ''
  redis.call('HSET', record, 'fires', fires == '' and name or (fires .. ' ' .. name))
end

-- callback(record, name): add the fire of a callback the batch has.
local function add_callback(record, name)
  if redis.call('HEXISTS', record, 'cb:' .. name) == 1 then add_fire(record, name) end
end

-- expire_when_settled(keys): once the batch ended and nothing is left to fire, its keys expire
-- after its retention (no sweeper).
local function expire_when_settled(keys)
  local r = redis.call('HMGET', keys[1], 'ended', 'fires', 'retention')
  if r[1] and r[1] ~= '' and (r[2] == false or r[2] == '') then
    local retention = tonumber(r[3]) or 86400000
    redis.call('PEXPIRE', keys[1], retention)
    if redis.call('EXISTS', keys[2]) == 1 then redis.call('PEXPIRE', keys[2], retention) end
  end
end

-- end_if_done(keys, now): a sealed batch whose every child ended: its final state, and the
-- fires it calls for.
local function end_if_done(keys, now)
  local record = keys[1]
  local r = redis.call('HMGET', record, 'state', 'total', 'ok', 'dead', 'cancelled', 'policy',
    'parent', 'ended', 'kind')
  local state, total = r[1], tonumber(r[2]) or 0
  local ok, dead, cancelled = tonumber(r[3]) or 0, tonumber(r[4]) or 0, tonumber(r[5]) or 0
  if state == 'open' or (r[8] and r[8] ~= '') or ok + dead + cancelled < total then return end
  redis.call('HSET', record, 'ended', now)
  if state == 'running' then
    if dead + cancelled == 0 or r[6] == 'ignore' then
      state = 'succeeded'
      add_callback(record, 'success')
    else
      state = 'failed'
      add_callback(record, 'failure')
    end
    redis.call('HSET', record, 'state', state)
  end
  if state ~= 'cancelled' then add_callback(record, 'complete') end
  if r[7] and r[7] ~= '' then add_fire(record, 'parent') end
end

-- pending_fires(record): {name, body or value, ...} of the fires still to do, for the relay.
local function pending_fires(record)
  local out = {}
  local fires = redis.call('HGET', record, 'fires') or ''
  for name in string.gmatch(fires, '%S+') do
    out[#out + 1] = name
    if string.sub(name, 1, 5) == 'step:' then
      out[#out + 1] = redis.call('HGET', record, name) or ''
      out[#out + 1] = redis.call('HGET', record, 'pv') or ''
    elseif name == 'parent' then
      local p = redis.call('HMGET', record, 'parent', 'state')
      out[#out + 1] = p[1] or ''
      out[#out + 1] = p[2] == 'succeeded' and 'ok' or 'dead'
    else
      out[#out + 1] = redis.call('HGET', record, 'cb:' .. name) or ''
      out[#out + 1] = ''
    end
  end
  return out
end
