-- now_ms(): the Redis server's clock in milliseconds.  Scripts are replicated by effects
-- (Redis >= 7.0), so reading TIME here is safe and every process agrees on one clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
