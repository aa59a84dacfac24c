--[[ touch: a live worker's heartbeat on the deliveries it is running.

Resets each delivery's idle time, so reclaim leaves it alone however long the handler runs,
but only while the delivery still belongs to this worker: one that was reclaimed meanwhile (the
worker was paused past the visibility timeout) is reported lost and left with its new owner.

KEYS[1] ready    stream  due jobs
KEYS[2] cancels  zset    running jobs cancelled, by cancel time (lua/cancel-7.lua)

ARGV[1] consumer group
ARGV[2] consumer (worker) name
ARGV[3..] entry ids
Max ARGV: 1002  = 2 + at most 1000 entries (shardq.store.delivery.MAX_TOUCH)

Returns {lost, cancelled}: lost, the entry ids now pending under another consumer (an entry no
longer pending at all was settled meanwhile: its ack raced this heartbeat, not reported);
cancelled, the job ids of the partition's latest running cancels (at most 1000; none unless
the partition has any: one EXISTS is all a partition without cancels pays), for the worker to
stop those it holds (a cancel's publish may have been missed).
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'zset'})
if wrong then return wrong end
local lost = {}
local cancelled = {}
if redis.call('EXISTS', KEYS[2]) == 1 then
  cancelled = redis.call('ZRANGE', KEYS[2], 0, 999, 'REV')
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {lost, cancelled} end
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if p then
    if p[2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    else
      lost[#lost + 1] = ARGV[i]
    end
  end
end
return {lost, cancelled}
