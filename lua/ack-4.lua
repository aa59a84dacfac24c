--[[ ack: settle jobs whose handlers succeeded: acknowledge, drop the entry and the envelope.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters

ARGV[1] consumer group
ARGV[2] '1': delete the acknowledged entries now; '0': keep them for the queue's retention
        (the dispatcher's trim removes them later)
ARGV[3..] pairs of (entry id, job id)

Returns the number of jobs settled.  An entry no longer pending (reclaimed and settled by
another worker, or dead-lettered as poison meanwhile) is not counted and its envelope is kept.
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash'})
if wrong then return wrong end
if (#ARGV - 2) % 2 ~= 0 then return {-11, #ARGV, 'argument count', 2, 2} end
local settled = 0
local delete = ARGV[2] == '1'
for i = 3, #ARGV, 2 do
  local eid, id = ARGV[i], ARGV[i + 1]
  if redis.call('XACK', KEYS[1], ARGV[1], eid) == 1 then
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    settled = settled + 1
  end
  if delete then redis.call('XDEL', KEYS[1], eid) end
end
if settled > 0 then
  count(KEYS[4], 'completed', settled)
end
return settled
