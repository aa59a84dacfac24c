--[[ fail: settle a job whose handler failed: back into the due set after a delay, or dead.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[4] dead     stream  dead letters
KEYS[5] errors   hash    job id -> last error
KEYS[6] stats    hash    counters
KEYS[7] outbox   hash    workflow children's ends not yet relayed (lua/includes/outbox.lua)

ARGV[1] consumer group
ARGV[2] entry id
ARGV[3] job id
ARGV[4] retry delay ms (366 days at most), or -1 to dead-letter now  number -1..31622400000 as delay
        (attempts used up, or a permanent error)
ARGV[5] error text (already truncated by the caller; kept to MAX_ERROR_BYTES here: it runs
        at maxmemory)
ARGV[6] due-hint channel (sharded pub/sub) to wake the dispatcher when the head moves earlier
ARGV[7] the job's result channel (its result key's name) when it keeps its result, else '':
        told when the job ends dead, so a producer waiting for the result stops waiting
ARGV[8] the job's workflow ref '<batch id>|<index>' when it          bytes 0..MAX_NAME_BYTES
        is a batch child or chain step, else '': a child that ends dead has its end written
        into the outbox with the error

Returns
  {1, due ms}   retry scheduled
  {2, now ms}   dead-lettered (also a job whose stored attempt is not a whole number 0..1e9:
                its attempts cannot be counted)
  {0}           nothing to settle: the delivery is no longer pending or the job was cancelled

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include envelope.lua
--@include checks.lua
--@include outbox.lua

-- Reads and checks first: the delivery must still be pending, the job stored and readable.
local error_text = string.sub(ARGV[5], 1, MAX_ERROR_BYTES)
local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'stream',
  KEYS[5], 'hash', KEYS[7], 'hash'})
if wrong then return wrong end
local now = now_ms()
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)[1]
if not pending then return {0} end
local id = ARGV[3]
local v = redis.call('HGET', KEYS[2], id)
local attempt, body
if v then
  local _state
  _state, attempt, body = split_envelope(v)
end

-- Writes: the job's new place first, then the delivery is settled.
local reply
if not v then
  reply = {0}  -- cancelled while it ran: nothing to keep
elseif not body then
  redis.call('HDEL', KEYS[2], id)  -- not an envelope: nothing can run it
  reply = {0}
elseif not attempt then
  -- Its attempts cannot be counted (nan + 1 stays nan: it would retry forever): dead, with its
  -- body kept (a replay starts it at 0).
  dead_letter_bad_attempt({KEYS[2], KEYS[4], KEYS[5], KEYS[6]}, id, v, body, now)
  count(KEYS[6], 'failed', 1)
  if ARGV[8] and ARGV[8] ~= '' then
    outbox_put(KEYS[7], ARGV[6], id, ARGV[8], 'dead', now, 'malformed envelope: attempt unreadable')
  end
  reply = {2, now}
elseif delay < 0 then
  dead_letter({KEYS[2], KEYS[4], KEYS[5], KEYS[6]}, id, attempt, body, error_text, now)
  count(KEYS[6], 'failed', 1)
  if ARGV[7] and ARGV[7] ~= '' then redis.call('SPUBLISH', ARGV[7], 'dead') end
  if ARGV[8] and ARGV[8] ~= '' then outbox_put(KEYS[7], ARGV[6], id, ARGV[8], 'dead', now, error_text) end
  reply = {2, now}
else
  local due = now + math.floor(delay)
  redis.call('HSET', KEYS[2], id, 'S' .. attempt .. '|' .. body)
  redis.call('HSET', KEYS[5], id, error_text)
  redis.call('ZADD', KEYS[3], due, id)
  if redis.call('ZRANGE', KEYS[3], 0, 0)[1] == id then
    redis.call('SPUBLISH', ARGV[6], due)
  end
  count(KEYS[6], 'failed', 1)
  count(KEYS[6], 'retried', 1)
  reply = {1, due}
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return reply
