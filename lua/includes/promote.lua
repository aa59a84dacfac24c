--@include checks.lua
--@include compact.lua
-- Moving due jobs of a partition from its due set to its ready stream: the dispatcher's
-- promote (lua/promote-8.lua, partitions without lanes) and a worker's read that promotes
-- first (lua/fetch-9.lua) do it the same way.

-- due_now(due, now, k): the due set's jobs due by now (Redis ms, as text), at most k (text),
-- lowest scores first, as ZRANGE ... WITHSCORES replies; or nil and the reply when the due set
-- is not a sorted set.  This read is the due set's type check for a caller that reads it
-- before its first write (fetch-9.lua: one TYPE less per call).
local function due_now(due, now, k)
  local batch = redis.pcall('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', '0', k, 'WITHSCORES')
  if batch['err'] then return nil, refused(due, 'zset', batch) end
  return batch, nil
end

-- move_due(batch, due, ready, jobs, stats, store, held): move the jobs of batch (due_now's
-- reply) to the ready stream, one XADD each, and out of the due set.  A compact member's
-- envelope (lua/includes/compact.lua: its id has no entry in the jobs hash) is written with
-- the command ``store``: 'HSETNX' for the dispatcher, 'HSET' for a worker (whose user may not
-- HSETNX: that is how enqueue-batch tells a producer, checks.lua producer_only); or, when
-- ``held`` is a table, not written but appended to it as {entry id, job id, body}: a worker's
-- read that hands the job out in the same call writes it once, as running, instead of
-- writing it waiting, reading it back and writing it again.
-- The first XADD doubles as the ready stream's type check (it is the call's first write when
-- nothing was acknowledged before it): returns nil and the reply when the stream is not a
-- stream, nothing written.  Else how many moved, the id of the last entry added ('1' when
-- none), and the score (due ms) of the first moved (nil when none).
local function move_due(batch, due, ready, jobs, stats, store, held)
  local moved = #batch / 2
  local last_entry = '1'
  for i = 1, #batch, 2 do
    local id, body = split_member(batch[i])
    if i == 1 then
      last_entry = redis.pcall('XADD', ready, '*', 'j', id, 'd', batch[i + 1])
      if type(last_entry) == 'table' then return nil, refused(ready, 'stream', last_entry) end
    else
      last_entry = redis.call('XADD', ready, '*', 'j', id, 'd', batch[i + 1])
    end
    if body then
      if held then
        held[#held + 1] = {last_entry, id, body}
      else
        redis.call(store, jobs, id, 'S0|' .. body)
      end
    end
  end
  if moved > 0 then
    -- The batch is the lowest-scored members, so they are ranks 0..moved-1: one removal.
    redis.call('ZREMRANGEBYRANK', due, '0', string.format('%d', moved - 1))
    count(stats, 'promoted', moved)
  end
  return moved, last_entry, batch[2]
end

-- park_held(jobs, held): write the waiting envelope of each job move_due held that the caller
-- did not hand out (its slot set to false when it did): promoted, it waits in the ready
-- stream for a read, like a job the dispatcher promoted.
local function park_held(jobs, held)
  for _, job in ipairs(held) do
    if job then redis.call('HSET', jobs, job[2], 'S0|' .. job[3]) end
  end
end
