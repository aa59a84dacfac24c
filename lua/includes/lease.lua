-- The lease value is '<token>:<owner>'.  lease_token(v) returns the token part or nil.
local function lease_token(v)
  if not v then return nil end
  return string.match(v, '^(%d+):')
end

-- fenced(lease_key, token): nil while token holds the lease, else the E_FENCED reply
-- {-1, token, lease or ''} to return before writing anything.
local function fenced(lease_key, token)
  local lease = redis.call('GET', lease_key)
  if lease_token(lease) ~= token then
    return {-1, token, lease or ''}
  end
  return nil
end
