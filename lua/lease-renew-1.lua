--[[ lease-renew: extend a lease, only while the caller's token is still the current one.

KEYS[1] lease    string  '<token>:<owner>' with expiry

ARGV[1] fencing token
ARGV[2] lease time ms                   number 100..86400000 as ttl

Returns
  1                   renewed
  {-1, token, lease}  E_FENCED: the lease expired or another owner holds it

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include lease.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'string'})
if wrong then return wrong end
local stale = fenced(KEYS[1], ARGV[1])
if stale then return stale end
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
