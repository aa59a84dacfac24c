--[[ ack: settle jobs whose handlers succeeded: acknowledge and drop the envelope.

The acknowledged stream entries are not deleted here (a per-entry XDEL was the largest single
cost of an ack): the partition's dispatcher trims the stream up to its oldest pending or
undelivered entry (trim.lua), a whole stream node at a time.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters

ARGV[1] consumer group
ARGV[2..] pairs of (entry id, job id)
Max ARGV: 2001  = 1 + 2 per entry: at most 1000 entries (shardq.store.delivery.MAX_ACK)

Returns the number of jobs settled.  An entry no longer pending (reclaimed and settled by
another worker, or dead-lettered as poison meanwhile) is not counted and its envelope is kept.
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash'})
if wrong then return wrong end
if (#ARGV - 1) % 2 ~= 0 then return {-11, #ARGV, 'argument count', 1, 2} end
-- Only entries still pending are settled (one reclaimed and settled elsewhere meanwhile, or
-- dead-lettered as poison, keeps its envelope); their envelopes go in one HDEL.
local ids = {}
for i = 2, #ARGV, 2 do
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then ids[#ids + 1] = ARGV[i + 1] end
end
-- HDEL of many fields at once, in chunks (unpack has a limit of a few thousand values).
local function hdel_all(key)
  for i = 1, #ids, 1000 do redis.call('HDEL', key, unpack(ids, i, math.min(i + 999, #ids))) end
end
local settled = #ids
if settled > 0 then
  hdel_all(KEYS[2])
  -- Most jobs never failed: the errors hash is usually empty, so skip the deletes then.
  if redis.call('HLEN', KEYS[3]) > 0 then hdel_all(KEYS[3]) end
  count(KEYS[4], 'completed', settled)
end
return settled
