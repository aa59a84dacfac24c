--[[ owner-info: who holds a partition's lease, since when, and when its next job is due.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    hash    token, released, granted
KEYS[3] due      zset    job id (or '<id> <body>', a compact job) scored by due ms

Returns {now ms, lease value or '', lease ttl ms, granted ms or -1, next due ms or -1}

Flags: no-writes  (reads only)
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string', KEYS[2], 'hash', KEYS[3], 'zset'})
if wrong then return wrong end
local lease = redis.call('GET', KEYS[1]) or ''
local ttl = redis.call('PTTL', KEYS[1])
local granted = int_of(redis.call('HGET', KEYS[2], 'granted'), 0, MAX_MS) or -1
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local next_due = -1
if head[2] then next_due = score_ms(head[2]) end
return {now_ms(), lease, ttl, granted, next_due}
