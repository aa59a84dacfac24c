--[[ members: heartbeat of one fleet member (dispatcher or worker) and the live membership.

Members are kept in a sorted set scored by the time their heartbeat expires (Redis clock), so a
member that stops heartbeating drops out after the timeout without anyone cleaning up.

KEYS[1] members  zset    member id scored by heartbeat expiry ms
KEYS[2] drain    set     member ids an operator asked to hold nothing (`shardq rebalance drain`)

ARGV[1] member id                       name
ARGV[2] membership timeout ms           number 100..3600000 as timeout
ARGV[3] '1' when the member is leaving (clean shutdown), else '0'

Returns {now ms, {live member ids...}, {draining member ids...}}

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua

-- A member's heartbeat never expires later than this: a timeout beyond it (or a member
-- written by hand with an endless expiry) is not a live process.
-- (ARGV[2]'s bound: shardq.store.fleet.MEMBER_MAX_TIMEOUT_MS)
local MAX_TIMEOUT = 3600000
local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'set'})
if wrong then return wrong end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (now + MAX_TIMEOUT), '+inf')
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + timeout, ARGV[1])
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
