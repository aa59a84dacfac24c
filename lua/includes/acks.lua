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

-- complete_entries(keys, group, from, now): ack_entries for jobs that keep their result:
-- keys = the calling function's KEYS (ready, jobs, errors, stats, then the jobs' result keys,
-- one each, in ARGV's order); ARGV[from..] holds 4 per job (entry id, job id, retention ms,
-- result record; checked by the caller).  A settled job's record is stored as
-- '<now ms>|<record>' expiring after its retention, and a waiter on the key's channel (its
-- own name: sharded pub/sub, same slot) is told.  An entry no longer pending writes no result:
-- whoever settled it owns the outcome.
local function complete_entries(keys, group, from, now)
  local ready, jobs, errors, stats = keys[1], keys[2], keys[3], keys[4]
  local ids = {}
  local n = 0
  for i = from, #ARGV, 4 do
    n = n + 1
    if redis.call('XACK', ready, group, ARGV[i]) == 1 then
      ids[#ids + 1] = ARGV[i + 1]
      local key = keys[4 + n]
      redis.call('SET', key, now .. '|' .. ARGV[i + 3], 'PX', ARGV[i + 2])
      redis.call('SPUBLISH', key, 'done')
    end
  end
  if #ids > 0 then count(stats, 'results', #ids) end
  return drop_settled(jobs, errors, stats, ids)
end
