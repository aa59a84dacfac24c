--@include checks.lua
-- Periodic schedules' per-name state, kept in the schedule state hash as
-- '<last fire ms>|<last tick ms>|<fires>|<misfires>|<paused 0/1>' (-1: never).
-- sched_state(v) returns the five fields as a table of whole numbers (the default for a
-- missing field, or one that is not a whole number in its range: nan, inf, hex, text, so a
-- damaged entry never stops a schedule and is written back whole).
local SCHED_RANGES = {{-1, MAX_MS}, {-1, MAX_MS}, {0, MAX_MS}, {0, MAX_MS}, {0, 1}}
local function sched_state(v)
  local s = {-1, -1, 0, 0, 0}
  if not v then return s end
  local i = 1
  for part in string.gmatch(v, '[^|]+') do
    if i > 5 then break end
    local n = int_of(part, SCHED_RANGES[i][1], SCHED_RANGES[i][2])
    if n then s[i] = n end
    i = i + 1
  end
  return s
end

local function sched_state_text(s)
  return string.format('%d|%d|%d|%d|%d', s[1], s[2], s[3], s[4], s[5])
end
