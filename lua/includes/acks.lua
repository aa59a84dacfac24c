--@include checks.lua
-- hdel_all(key, ids): HDEL of every field in ids, in chunks (unpack has a limit of a few
-- thousand values).
local function hdel_all(key, ids)
  for i = 1, #ids, 1000 do redis.call('HDEL', key, unpack(ids, i, math.min(i + 999, #ids))) end
end

-- drop_settled(jobs, errors, stats, ids, errors_len): drop the envelopes (and last errors) of
-- the settled jobs ids and count them completed; returns how many.  errors_len: the errors
-- hash's HLEN when the caller has read it already, else nil.
local function drop_settled(jobs, errors, stats, ids, errors_len)
  local settled = #ids
  if settled == 0 then return 0 end
  hdel_all(jobs, ids)
  -- Most jobs never failed: the errors hash is usually empty, so skip the deletes then.
  if (errors_len or redis.call('HLEN', errors)) > 0 then hdel_all(errors, ids) end
  count(stats, 'completed', settled)
  return settled
end

-- ack_entries(ready, jobs, errors, stats, group, from, errors_len): settle the (entry id, job
-- id) pairs of ARGV[from..] whose handlers succeeded: acknowledge each entry still pending and
-- drop its envelope (and last error).  An entry no longer pending (reclaimed and settled by
-- another worker, or dead-lettered as poison meanwhile) is not counted and its envelope is
-- kept.  Returns how many were settled; or nil and the reply when the first XACK is refused:
-- it doubles as the ready stream's type check for a caller whose first write it is
-- (fetch-9.lua), so nothing is written then.  The caller has checked the other keys' types and
-- that ARGV[from..] holds whole pairs.  The acknowledged entries are not deleted here (a
-- per-entry XDEL was the largest single cost of an ack): the partition's dispatcher trims the
-- stream up to its oldest pending or undelivered entry (lua/trim-6.lua), a whole stream node
-- at a time.
local function ack_entries(ready, jobs, errors, stats, group, from, errors_len)
  local ids = {}
  for i = from, #ARGV, 2 do
    local r
    if i == from then
      r = redis.pcall('XACK', ready, group, ARGV[i])
      if type(r) == 'table' then return nil, refused(ready, 'stream', r) end
    else
      r = redis.call('XACK', ready, group, ARGV[i])
    end
    if r == 1 then ids[#ids + 1] = ARGV[i + 1] end
  end
  return drop_settled(jobs, errors, stats, ids, errors_len), nil
end
