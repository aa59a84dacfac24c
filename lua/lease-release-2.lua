--[[ lease-release: give a lease back at once (shutdown, rebalance), only if it is still ours.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    hash    token, released, granted

ARGV[1] fencing token

Returns 1 released, 0 not ours (already expired or taken over: nothing to do)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include lease.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string', KEYS[2], 'hash'})
if wrong then return wrong end
if lease_token(redis.call('GET', KEYS[1])) == ARGV[1] then
  redis.call('HSET', KEYS[2], 'released', '1')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
