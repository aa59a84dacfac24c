-- The lease value is '<token>:<owner>'.  lease_token(v) returns the token part or nil.
local function lease_token(v)
  if not v then return nil end
  return string.match(v, '^(%d+):')
end
