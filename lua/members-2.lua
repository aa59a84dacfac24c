--[[ members: heartbeat of one fleet member (dispatcher or worker) and the live membership.

Members are kept in a sorted set scored by the time their heartbeat expires (Redis clock), so a
member that stops heartbeating drops out after the timeout without anyone cleaning up.

KEYS[1] members  zset    member id scored by heartbeat expiry ms
KEYS[2] drain    set     member ids an operator asked to hold nothing (`shardq rebalance --drain`)

ARGV[1] member id
ARGV[2] membership timeout ms
ARGV[3] '1' when the member is leaving (clean shutdown), else '0'

Returns {now ms, {live member ids...}, {draining member ids...}}

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua

local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
-- A drain request for a member that is gone has done its job.
local draining = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if redis.call('ZSCORE', KEYS[1], id) then
    draining[#draining + 1] = id
  else
    redis.call('SREM', KEYS[2], id)
  end
end
return {now, live, draining}
