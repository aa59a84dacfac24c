-- Checks every script makes before its first write: Redis does not roll a script back when a
-- command fails half-way, so anything that can fail is found here, while nothing is written.

-- wrong_type(spec): spec = {key, 'hash', key, 'zset', ...}.  nil when each key is missing or of
-- the expected type, else the reply {-10, key, found type, expected type} (E_WRONG_TYPE): the
-- key was written by something other than shardq.
local function wrong_type(spec)
  for i = 1, #spec, 2 do
    local found = redis.call('TYPE', spec[i])['ok']
    if found ~= 'none' and found ~= spec[i + 1] then
      return {-10, spec[i], found, spec[i + 1]}
    end
  end
  return nil
end

-- arg_number(i, lo, hi): ARGV[i] as a finite number within [lo, hi], or nil and the reply
-- {-11, i, value, lo, hi} (E_BAD_ARGUMENT).  Limits that guard correctness are checked here
-- too, not only by the caller.
local function arg_number(i, lo, hi)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= v or v < lo or v > hi then
    return nil, {-11, i, tostring(ARGV[i]), tostring(lo), tostring(hi)}
  end
  return v, nil
end

-- count(stats, field, n): add n to a counter of the stats hash.  Counters are advisory: one
-- that is not a number (a bad write by hand) is reset to n, and a stats key of the wrong type
-- is left alone, so a counter never stops a job.
local function count(stats, field, n)
  local r = redis.pcall('HINCRBY', stats, field, n)
  if type(r) == 'table' and r['err'] then
    redis.pcall('HSET', stats, field, n)
  end
end
