--[[ lease-acquire: take or extend the lease on one partition.

A new grant takes the next fencing token from a counter that never goes back, so a stale owner
holding an older token is rejected by every script that checks the lease.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    hash    token (only grows), released ('1' when the last owner let go),
                         granted (ms of the last grant); never expires

ARGV[1] owner (dispatcher id)                                       name
ARGV[2] lease ttl ms: how long the grant lives unrenewed (the     number 100..86400000 as ttl
        fleet's lease ttl), and the most a lease it honours may have left
ARGV[3..] owners whose unexpired lease may be taken over: dispatchers whose membership expired
          (dead or paused), that have been absent from the fleet a whole membership timeout,
          earlier incarnations of this dispatcher (restarted in place), or live ones that have
          not claimed the partition for a whole lease time (shardq/dispatcher/leases.py).
          Safe, because every write of the displaced owner checks its now stale token.  A lease
          without expiry, or with more than ARGV[2] left, is taken over whoever holds it: the
          fleet runs one lease ttl, so only a raw SET, or a call with a longer ttl than this
          caller's (both open to any dispatcher-role user), makes one.  The bound is the
          caller's own setting, never a stored value.
Max ARGV: 1026  = 2 + at most 1024 owners (shardq.store.fleet.MAX_DISPLACE)

Returns
  {1, token, 1, takeover}    newly granted; takeover 1 when the previous owner's lease expired
                             or was displaced instead of being released (it died or was paused,
                             or its lease would not have expired)
  {1, token, 0, 0}           already ours: extended
  {0, token, owner, ttl ms}  held by another owner (its lease expires within its lease ttl)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string', KEYS[2], 'hash'})
if wrong then return wrong end
local v = redis.call('GET', KEYS[1])
if v then
  local token, owner = string.match(v, '^(%d+):(.*)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ttl)
    return {1, token, 0, 0}
  end
  local displace = false
  for i = 3, #ARGV do
    if owner == ARGV[i] then displace = true end
  end
  if not displace then
    -- Leases always expire: this script grants one for its owner's lease ttl, and promote
    -- and renew extend it by that, the fleet's one lease ttl.  One without an expiry (PTTL
    -- -1), or with more than this caller's lease ttl left, was written some other way (a
    -- hand, a bug, a dispatcher-role user holding a partition for an hour) and could block the
    -- partition for that long (its owner may never have been a member, so nobody would name
    -- it here): take it over, as from a gone owner.  Safe as every displacement is: the
    -- holder's writes check its token.  (Not bounded by a lease time stored with the grant: a
    -- dispatcher-role user can write the fence hash.)
    local left = redis.call('PTTL', KEYS[1])
    if left >= 0 and left <= ttl then return {0, token or '', owner or v, left} end
  end
end
-- The fencing token only grows: one that is not a whole number (nan, inf, hex: HINCRBY would
-- fail on it, or a restart from 0 would hand out tokens a stale owner holds) is refused, and
-- the partition stays unleased until an operator repairs it (CorruptKeyError says how).
local last = redis.call('HGET', KEYS[2], 'token')
if last and not int_of(last, 0, 2 ^ 53) then
  return {-10, KEYS[2], 'token ' .. last, 'a whole number'}
end
local token = redis.call('HINCRBY', KEYS[2], 'token', 1)
local takeover = 0
if v or (token > 1 and redis.call('HGET', KEYS[2], 'released') ~= '1') then takeover = 1 end
redis.call('HSET', KEYS[2], 'released', '0', 'granted', now_ms())
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', ttl)
return {1, tostring(token), 1, takeover}
