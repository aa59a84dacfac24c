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

-- refused(key, expected, err): the reply for a command on key that failed under pcall, where
-- that command doubles as the key's type check (a read before the first write, or the first
-- write itself: cheaper than a TYPE per key on every call).  E_WRONG_TYPE when the key holds
-- another type; else the error itself, as redis.call would have raised it.
local function refused(key, expected, err)
  local found = redis.call('TYPE', key)['ok']
  if found ~= 'none' and found ~= expected then return {-10, key, found, expected} end
  return err
end

-- Numbers read from Redis or ARGV are checked as numbers before use: Lua's tonumber takes
-- 'nan', 'inf', '1e400' (inf), '0x10' and ' 5 ', and nan + 1 stays nan (a job whose attempt
-- is nan never runs out of attempts; it reaches Python as -2^63).  These readers take decimal
-- text only, and only within the range given; anything else is nil, for the caller to refuse,
-- dead-letter, or replace with a safe default, before it writes.

-- int_of(v, lo, hi): v (a string Redis returned, or a number) as an integer when it is the
-- decimal text of one ('^-?%d+$') within [lo, hi]; else nil.
local function int_of(v, lo, hi)
  local n
  if type(v) == 'number' then
    n = v
    if n ~= math.floor(n) then return nil end
  elseif type(v) == 'string' and #v <= 17 and string.find(v, '^%-?%d+$') then
    n = tonumber(v)
  else
    return nil
  end
  if n ~= n or n < lo or n > hi then return nil end
  return n
end

-- float_of(v, lo, hi): v as a finite number within [lo, hi] when it is decimal text ('1.5',
-- '-2', '1e-06'; no nan, inf, hex or spaces); else nil.
local function float_of(v, lo, hi)
  local n
  if type(v) == 'number' then
    n = v
  elseif type(v) == 'string' and #v <= 40 and string.find(v, '^[%-%+]?[%d%.]+[eE]?[%-%+]?%d*$') then
    n = tonumber(v)
  end
  if n == nil or n ~= n or n < lo or n > hi then return nil end
  return n
end

-- The latest ms time a script replies (9999-12-31T23:59:59.999Z, the last one a date type
-- holds): due times, ticks and holds are far below (max_horizon is at most 1e13 ms).
local MAX_MS = 253402300799999

-- score_ms(s): a sorted-set score read back (a due time, a tick) as whole ms within
-- [0, MAX_MS], for replies and comparisons: -inf and anything earlier read 0 (overdue),
-- +inf and anything later MAX_MS (never), a fraction is cut.  Sorted sets hold no nan.
local function score_ms(s)
  local n = tonumber(s)
  if n == nil or n ~= n or n < 0 then return 0 end
  if n > MAX_MS then return MAX_MS end
  return math.floor(n)
end

-- head_ms(zset): the score of a sorted set's first member (a due time, a tick) as score_ms, or
-- -1 when the set is empty.
local function head_ms(zset)
  local head = redis.call('ZRANGE', zset, '0', '0', 'WITHSCORES')
  if head[2] then return score_ms(head[2]) end
  return -1
end

-- arg_number(i, lo, hi): ARGV[i] as a finite number within [lo, hi], or nil and the reply
-- {-11, i, value, lo, hi} (E_BAD_ARGUMENT).  Limits that guard correctness are checked in the
-- script too, not only by the caller.  (Checked for nan and range, not parsed as strictly as
-- values read from Redis: ARGV comes from shardq's own callers, and a call that enqueues a job
-- reads four of them; '0x10' or ' 5' would mean what they say.)  A bound a header can state
-- ('number lo..hi', lua/README.md) the loader checks, as this does, before the body runs;
-- this is for the bounds it cannot (they depend on other arguments).
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
  -- As text: a Lua number given to a command is formatted with '%.14g', a cost that shows in
  -- the profile of the steady state's one call per job.
  local v = string.format('%d', n)
  local r = redis.pcall('HINCRBY', stats, field, v)
  if type(r) == 'table' and r['err'] then
    redis.pcall('HSET', stats, field, v)
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
  if not redis.acl_check_cmd('HSET', ctl, 'paused', '1') then return {-14, 'operator', ctl} end
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

-- refused_writes(role, writes): nil when the calling user may run each write of writes, a list
-- of {command, key, args...} (redis.acl_check_cmd), else {-14, role, key} for the first it may
-- not.  For a script whose writes on one path are not all granted to every role that calls
-- it: it asks before its first write, so the call is refused whole instead of failing half-way
-- (a debounce as a user without HSET removed the job's due entry, then lost the job).
local function refused_writes(role, writes)
  for _, w in ipairs(writes) do
    if not redis.acl_check_cmd(unpack(w)) then return {-14, role, w[2]} end
  end
  return nil
end
