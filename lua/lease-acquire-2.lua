--[[ lease-acquire: take or extend the lease on one partition.

A new grant takes the next fencing token from a counter that never goes back, so a stale owner
holding an older token is rejected by every script that checks the lease.

KEYS[1] lease    string  '<token>:<owner>' with expiry
KEYS[2] fence    counter fencing tokens (never expires)

ARGV[1] owner (dispatcher id)
ARGV[2] lease time ms

Returns
  {1, token, 1}              newly granted
  {1, token, 0}              already ours: extended
  {0, token, owner, ttl ms}  held by another owner
]]
local v = redis.call('GET', KEYS[1])
if v then
  local token, owner = string.match(v, '^(%d+):(.*)$')
  if owner == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
    return {1, token, 0}
  end
  return {0, token or '', owner or v, redis.call('PTTL', KEYS[1])}
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. ':' .. ARGV[1], 'PX', tonumber(ARGV[2]))
return {1, tostring(token), 1}
