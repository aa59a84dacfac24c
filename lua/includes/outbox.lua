-- Workflow children (shardq.plans.workflows): a child's body carries the option
-- "g": [batch id, index, carry] (shardq.jobs.encode_body).  Its end (completed, dead) is
-- written into its own partition's outbox hash, job id -> '<batch id>|<index>|<outcome>|<ended ms>|<value>',
-- by the same script that ends it, so no crash can separate the two: a worker killed after its
-- ack leaves the report in Redis, and an entry no longer pending writes none (whoever settled
-- it reported it).  The partition's dispatcher relays each report to the batch's slot with an
-- idempotent script (lua/batch-report-2.lua: the child's bit in the batch's bitmap) and only
-- then deletes it (shardq.dispatcher.relay).

-- outbox_put(outbox, hint, id, ref, outcome, now, value): record one child's end (at now ms,
-- for the relay's lag metric) and wake the partition's relay (the due-hint channel: message
-- 'o', which the promoter ignores) when the outbox was empty: a relay reads a partition's
-- outbox until a round finds it empty, so entries added to one not yet empty are read by the
-- round in course, and a batch's children ending together publish one hint per relay round,
-- not one per child (a published message costs Redis a write to every subscriber).
local function outbox_put(outbox, hint, id, ref, outcome, now, value)
  redis.call('HSET', outbox, id, ref .. '|' .. outcome .. '|' .. now .. '|' .. value)
  if hint and hint ~= '' and redis.call('HLEN', outbox) == 1 then
    redis.call('SPUBLISH', hint, 'o')
  end
end

-- workflow_ref(body): '<batch id>|<index>' of a child's body, or nil for any other job.  The
-- JSON is decoded only when the body holds the option's name (a dead letter, not every ack:
-- the worker passes its children's refs to complete-5 itself).
local function workflow_ref(body)
  if not body or not string.find(body, '"g":[', 1, true) then return nil end
  local json = body
  if string.sub(json, 1, 1) == '@' then
    local close = string.find(json, '@', 2, true)
    if not close then return nil end
    json = string.sub(json, close + 1)
  end
  local ok, decoded = pcall(cjson.decode, json)
  if not ok or type(decoded) ~= 'table' then return nil end
  local options = decoded[3]
  if type(options) ~= 'table' or type(options['g']) ~= 'table' then return nil end
  local batch, index = options['g'][1], options['g'][2]
  if type(batch) ~= 'string' or string.find(batch, '|', 1, true) or type(index) ~= 'number'
    or index ~= math.floor(index) or index < 0 or index >= MAX_TOTAL then
    return nil
  end
  return batch .. '|' .. string.format('%d', index)
end
