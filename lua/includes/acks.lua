--@include checks.lua
-- drop_settled(jobs, errors, stats, ids): drop the envelopes (and last errors) of the settled
-- jobs ids and count them completed; returns how many.
local function drop_settled(jobs, errors, stats, ids)
  local settled = #ids
  if settled == 0 then return 0 end
  -- HDEL of many fields at once, in chunks (unpack has a limit of a few thousand values).
  local function hdel_all(key)
    for i = 1, settled, 1000 do redis.call('HDEL', key, unpack(ids, i, math.min(i + 999, settled))) end
  end
  hdel_all(jobs)
  -- Most jobs never failed: the errors hash is usually empty, so skip the deletes then.
  if redis.call('HLEN', errors) > 0 then hdel_all(errors) end
  count(stats, 'completed', settled)
  return settled
end

-- ack_entries(ready, jobs, errors, stats, group, from): settle the (entry id, job id) pairs of
-- ARGV[from..] whose handlers succeeded: acknowledge each entry still pending and drop its
-- envelope (and last error).  An entry no longer pending (reclaimed and settled by another
-- worker, or dead-lettered as poison meanwhile) is not counted and its envelope is kept.
-- Returns how many were settled.  The caller has checked the keys' types and that ARGV[from..]
-- holds whole pairs.  The acknowledged entries are not deleted here (a per-entry XDEL was the
-- largest single cost of an ack): the partition's dispatcher trims the stream up to its oldest
-- pending or undelivered entry (trim.lua), a whole stream node at a time.
local function ack_entries(ready, jobs, errors, stats, group, from)
  local ids = {}
  for i = from, #ARGV, 2 do
    if redis.call('XACK', ready, group, ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i + 1] end
  end
  return drop_settled(jobs, errors, stats, ids)
end
