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

-- Redis ACLs cannot tell one function from another (FCALL is one command, and function names
-- change with every release), but they can tell who may write which key, and a script may ask
-- (redis.acl_check_cmd, Redis 7.0).  So a function that is one role's asks first whether the
-- caller may make a write only that role (and the operator and admin) may make, and refuses
-- with E_NOT_PERMITTED {-14, role, key} otherwise, before anything is written.

-- operator_only(ctl, sibling): nil when the calling user may write the partition's control
-- hash (the operator and admin roles: shardq.acl), else {-14, 'operator', ctl}.  For the
-- functions that steer a partition (pause, lanes, empty, purge, replay, run now).  ctl must be
-- the control hash of the partition the other keys belong to (sibling's tag + ':ctl'), or a
-- caller could name a key it may write instead: {-14, 'operator', ctl, why} otherwise.
local function operator_only(ctl, sibling)
  local tag = string.match(sibling, '^{[^{}]+}:')
  if not tag or ctl ~= tag .. 'ctl' then
    return {-14, 'operator', ctl, 'not the control hash of ' .. sibling}
  end
  if not redis.acl_check_cmd('HSET', ctl, 'v', '1') then return {-14, 'operator', ctl} end
  return nil
end

-- producer_only(jobs, due): nil when the calling user may store job envelopes (HSETNX) and
-- add to the due set (ZADD), as only producers (and the operator and admin) may; else
-- {-14, 'producer', key}.  Bulk enqueue asks once per call, so a dispatcher (which may store
-- envelopes for periodic jobs) or a worker (which may put jobs back in the due set) is refused
-- before its first job rather than half-way through it.
local function producer_only(jobs, due)
  if not redis.acl_check_cmd('HSETNX', jobs, 'j', 'v') then return {-14, 'producer', jobs} end
  if not redis.acl_check_cmd('ZADD', due, '0', 'j') then return {-14, 'producer', due} end
  return nil
end
