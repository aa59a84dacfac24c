-- Compact waiting jobs (queue layout 3).  A job enqueued with a freshly generated *timed* id
-- (shardq.jobs.new_timed_job_id: the first 8 characters are its due ms in base64, '.' for '-',
-- then 72 random bits, so the id is as unique as any generated id)
-- waits as ONE due-set member '<id> <body>' scored by that due time, with no entry in the jobs
-- hash: a hash entry costs ~60 B more per waiting job than the member's longer string does.
-- Promote writes the envelope into the jobs hash when the job comes due; every other state
-- (ready, running, retrying, dead, rescheduled) keeps the plain layout: the member is the bare
-- id, the envelope lives in the jobs hash.
--
-- Anyone holding only the id finds such a job: its due time is in the id, and members of one
-- score are kept in byte order, so the job is the first member at that score that is >=
-- '<id> ' (ids have no spaces: a space also separates id and body unambiguously).
-- A job is stored compactly only when its id encodes exactly its due time; for any other id
-- the search below is a miss, never a wrong hit.

-- Byte -> value of the id alphabet; built on first use (a library's load runs without the
-- string library).
local B64

-- id_due(id): the due ms a timed job id encodes, or nil when the id is not one.
local function id_due(id)
  if #id < 20 then return nil end  -- timed ids are 20 characters (more with an idem suffix)
  if not B64 then
    B64 = {}
    local alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._'
    for i = 1, 64 do B64[string.byte(alphabet, i)] = i - 1 end
  end
  local v = 0
  for i = 1, 8 do
    local d = B64[string.byte(id, i)]
    if d == nil then return nil end
    v = v * 64 + d
  end
  return v
end

-- split_member(m): the job id and body of a compact member; the member and nil for a bare id.
local function split_member(m)
  local sp = string.find(m, ' ', 1, true)
  if not sp then return m, nil end
  return string.sub(m, 1, sp - 1), string.sub(m, sp + 1)
end

-- bytes_less(a, b): a < b in byte order, as Redis orders the members of one score (Lua's own
-- '<' follows the server's collation locale, which need not be byte order).
local function bytes_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- compact_find(due, id): the member and due ms of the job stored compactly under id, or nil.
-- A few commands for an id whose due ms few jobs share; a binary search over the ranks of
-- that score (log2 of their number, each O(log N)) when a bulk enqueue put many there.
local function compact_find(due_key, id)
  local d = id_due(id)
  if not d then return nil end
  local n = redis.call('ZCOUNT', due_key, d, d)
  if n == 0 then return nil end
  local prefix = id .. ' '
  if n <= 8 then
    for _, m in ipairs(redis.call('ZRANGE', due_key, d, d, 'BYSCORE')) do
      if string.sub(m, 1, #prefix) == prefix then return m, d end
    end
    return nil
  end
  local lo = redis.call('ZCOUNT', due_key, '-inf', '(' .. d)
  local hi = lo + n
  local last = hi
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_less(redis.call('ZRANGE', due_key, mid, mid)[1], prefix) then lo = mid + 1 else hi = mid end
  end
  if lo < last then
    local m = redis.call('ZRANGE', due_key, lo, lo)[1]
    if string.sub(m, 1, #prefix) == prefix then return m, d end
  end
  return nil
end

-- stored_body(jobs, due, id, search): the body of the job already stored under id: its
-- jobs-hash envelope's, or with ``search`` a compact member's (compact_find); false for an
-- envelope that is not one, nil when no job is stored under id.  Enqueue's duplicate check (a
-- fresh timed id needs no search: see ENQUEUE_MODES).
local function stored_body(jobs_key, due_key, id, search)
  local stored = redis.call('HGET', jobs_key, id)
  if stored then
    local bar = string.find(stored, '|', 1, true)
    return bar and string.sub(stored, bar + 1) or false
  end
  if search then
    local member = compact_find(due_key, id)
    if member then return select(2, split_member(member)) end
  end
  return nil
end

-- expand_compact(jobs, due, member, score, body): turn a compact job into the plain layout in
-- place (envelope in the jobs hash, bare id in the due set at the same score), for the scripts
-- that change a waiting job (reschedule, run-now): they then go on as for any job.
local function expand_compact(jobs_key, due_key, id, member, score, body)
  redis.call('ZREM', due_key, member)
  redis.call('HSETNX', jobs_key, id, 'S0|' .. body)
  redis.call('ZADD', due_key, score, id)
end

-- A 'tin' job is due at its id's time when that is this close to now + delay: the producer put
-- its estimate of the Redis clock (from earlier replies) plus the delay there.
local TIMED_SLACK_MS = 250
-- The schedule modes enqueue takes -> the due_time (schedule.lua) mode they use: 'in' (a
-- delay) and 'at' (absolute ms); 'tin' and 'tat' the same for a timed id the producer has just
-- generated, in a queue of layout 3: the job may then be stored compactly (timed_due), and its
-- id needs no search (a resend of the same call finds its own member: ZADD NX adds nothing).
local ENQUEUE_MODES = {['in'] = 'in', at = 'at', tin = 'in', tat = 'at'}

-- timed_due(mode, due, id, now, horizon): the due ms (due_time's, or for 'tin' the id's when
-- within TIMED_SLACK_MS of it) and whether the job waits compactly: a 'tin'/'tat' job whose id
-- encodes exactly that due time, later than now.
local function timed_due(mode, due, id, now, horizon)
  if mode ~= 'tin' and mode ~= 'tat' then return due, false end
  local d = id_due(id)
  if d and mode == 'tin' and math.abs(d - due) <= TIMED_SLACK_MS and d <= now + horizon then
    due = d
  end
  return due, d == due and due > now
end
