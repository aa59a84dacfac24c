-- due_time(mode, value, now, tolerance, horizon): when a job is due, on the Redis clock.
--   mode 'in': value is a delay in ms from now; 'at': value is an absolute time in ms.
-- Returns due, nil when acceptable; else nil and the error reply (checked before any write):
--   {-2, at, now, tolerance}   E_DUE_IN_PAST: an 'at' time older than now - tolerance
--   {-3, due, now, horizon}    E_BEYOND_HORIZON: later than now + horizon
local function due_time(mode, value, now, tolerance, horizon)
  local v = tonumber(value)
  local due
  if mode == 'in' then
    due = now + v
  else
    due = v
    if due < now - tolerance then
      return nil, {-2, tostring(value), tostring(now), tostring(tolerance)}
    end
  end
  if due > now + horizon then
    return nil, {-3, tostring(due), tostring(now), tostring(horizon)}
  end
  return due, nil
end
