--[[ members: heartbeat of one fleet member (dispatcher or worker) and the live membership.

Members are kept in a sorted set scored by the time their heartbeat expires (Redis clock), so a
member that stops heartbeating drops out after the timeout without anyone cleaning up.

KEYS[1] members  zset    member id scored by heartbeat expiry ms
KEYS[2] drain    set     member ids an operator asked to hold nothing (`shardq rebalance --drain`)

ARGV[1] member id (1..MAX_NAME_BYTES bytes)
ARGV[2] membership timeout ms
ARGV[3] '1' when the member is leaving (clean shutdown), else '0'

Returns {now ms, {live member ids...}, {draining member ids...}}
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua

-- A member's heartbeat never expires later than this: a timeout beyond it (or a member
-- written by hand with an endless expiry) is not a live process.
local MAX_TIMEOUT = 3600000
local timeout, bad = arg_number(2, 100, MAX_TIMEOUT)
if bad then return bad end
local bad_id = arg_name(1)
if bad_id then return bad_id end
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
