--[[ owner-info: who holds a partition's lease, since when, and when its next job is due.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    hash    token, released, granted
KEYS[3] due      zset    job id scored by due ms

Returns {now ms, lease value or '', lease ttl ms, granted ms or -1, next due ms or -1}

Flags: no-writes  (reads only)
]]
--@include now.lua
local lease = redis.call('GET', KEYS[1]) or ''
local ttl = redis.call('PTTL', KEYS[1])
local granted = tonumber(redis.call('HGET', KEYS[2], 'granted') or '-1')
local head = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
local next_due = -1
if head[2] then next_due = tonumber(head[2]) end
return {now_ms(), lease, ttl, granted, next_due}
