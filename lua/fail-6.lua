--[[ fail: settle a job whose handler failed: back into the due set after a delay, or dead.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] due      zset    job id scored by due ms
KEYS[4] dead     stream  dead letters
KEYS[5] errors   hash    job id -> last error
KEYS[6] stats    hash    counters

ARGV[1] consumer group
ARGV[2] entry id
ARGV[3] job id
ARGV[4] retry delay ms, or -1 to dead-letter now (attempts used up, or a permanent error)
ARGV[5] error text (already truncated by the caller)
ARGV[6] due-hint channel (sharded pub/sub) to wake the dispatcher when the head moves earlier

Returns
  {1, due ms}   retry scheduled
  {2, now ms}   dead-lettered
  {0}           nothing to settle: the delivery is no longer pending or the job was cancelled

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include envelope.lua

local now = now_ms()
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if acked == 0 then return {0} end
local id = ARGV[3]
local v = redis.call('HGET', KEYS[2], id)
if not v then return {0} end
local _, attempt, body = split_envelope(v)
if not attempt then
  redis.call('HDEL', KEYS[2], id)
  return {0}
end
redis.call('HINCRBY', KEYS[6], 'failed', 1)

local delay = tonumber(ARGV[4])
if delay < 0 then
  dead_letter({KEYS[2], KEYS[4], KEYS[5], KEYS[6]}, id, attempt, body, ARGV[5], now)
  return {2, now}
end
local due = now + delay
redis.call('HSET', KEYS[2], id, 'S' .. attempt .. '|' .. body)
redis.call('HSET', KEYS[5], id, ARGV[5])
redis.call('ZADD', KEYS[3], due, id)
if redis.call('ZRANGE', KEYS[3], 0, 0)[1] == id then
  redis.call('SPUBLISH', ARGV[6], due)
end
redis.call('HINCRBY', KEYS[6], 'retried', 1)
return {1, due}
