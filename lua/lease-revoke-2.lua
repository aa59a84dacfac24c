--[[ lease-revoke: an operator takes a partition away from its owner (`shardq rebalance even`).

The owner's next promote or renewal is rejected by the fencing check, so it stops draining the
partition; another dispatcher acquires it with a newer token.  Safe under load: at no instant can
two dispatchers promote the same partition.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    hash    token, released, granted

ARGV[1] the owner expected to hold it (nothing is done if another owner holds it now)

Returns 1 revoked, 0 not held by that owner

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string', KEYS[2], 'hash'})
if wrong then return wrong end
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^%d+:(.*)$') == ARGV[1] then
  redis.call('HSET', KEYS[2], 'released', '1')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
