--@include checks.lua
--@include compact.lua
-- Moving due jobs of a partition from its due set to its ready stream: the dispatcher's
-- promote (lua/promote-8.lua, partitions without lanes) and a worker's read that promotes
-- first (lua/fetch-9.lua) do it the same way.

-- move_due(due, ready, jobs, stats, now, k, store): move up to k jobs due by now (Redis ms),
-- lowest scores first, one XADD each; a compact member's envelope is written into the jobs
-- hash on the way (lua/includes/compact.lua: its id has no entry) with the command ``store``:
-- 'HSETNX' for the dispatcher, 'HSET' for a worker (whose user may not HSETNX: that is how
-- enqueue-batch tells a producer, checks.lua producer_only).  Returns how many moved, the
-- id of the last entry added ('1' when none), and the score (due ms) of the first moved (nil
-- when none).
local function move_due(due, ready, jobs, stats, now, k, store)
  local batch = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, k, 'WITHSCORES')
  local moved = #batch / 2
  local last_entry = '1'
  for i = 1, #batch, 2 do
    local id, body = split_member(batch[i])
    if body then redis.call(store, jobs, id, 'S0|' .. body) end
    last_entry = redis.call('XADD', ready, '*', 'j', id, 'd', batch[i + 1])
  end
  if moved > 0 then
    -- The batch is the lowest-scored members, so they are ranks 0..moved-1: one removal.
    redis.call('ZREMRANGEBYRANK', due, 0, moved - 1)
    count(stats, 'promoted', moved)
  end
  return moved, last_entry, batch[2]
end

-- head_due(due): the earliest remaining job's due ms, or -1 when none waits.
local function head_due(due)
  local head = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
  if head[2] then return score_ms(head[2]) end
  return -1
end
