--[[ trim: keep a partition's streams bounded, never dropping a job that is still owed a run.

The ready stream is trimmed (approximate MINID, so whole nodes only and never past the bound)
up to the oldest entry that is still pending or undelivered, or younger than the acknowledged-
entry retention, whichever is oldest.  The dead-letter stream is cut to its cap, oldest first;
the dead jobs those entries name are deleted with them and counted in stats.dead_dropped.
Run by the partition's dispatcher, so it checks the fencing token like promote does.

KEYS[1] ready    stream  due jobs
KEYS[2] dead     stream  dead letters
KEYS[3] jobs     hash    job id -> envelope
KEYS[4] errors   hash    job id -> last error
KEYS[5] stats    hash    counters
KEYS[6] lease    string  '<token>:<owner>'

ARGV[1] fencing token
ARGV[2] consumer group
ARGV[3] retention of acknowledged ready entries, ms (0: none)  number 0..2592000000 as retention
ARGV[4] dead-letter cap (entries)                              number 1..1e12 as cap
ARGV[5] most ready entries to trim in this call                number 1..100000 as limit
        (whole stream nodes: cheap); at most min(ARGV[5], 1000) dead letters are dropped
        (each one also deletes its job)

Returns {ready entries trimmed, dead letters dropped, owed}, owed 1 when the ready stream still
holds a job owed a run (pending or undelivered: its settling leaves an entry to trim) else 0;
or {-1, token, lease} (E_FENCED)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include lease.lua
--@include envelope.lua
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash', KEYS[4], 'hash',
  KEYS[6], 'string'})
if wrong then return wrong end
local stale = fenced(KEYS[6], ARGV[1])
if stale then return stale end
local now = now_ms()
local trimmed, dropped, owed = 0, 0, 0

local function id_ms(id)
  return tonumber(string.match(id, '^(%d+)-'))
end

if redis.call('EXISTS', KEYS[1]) == 1 then
  local bound = now - retention
  local first = redis.call('XPENDING', KEYS[1], ARGV[2], '-', '+', 1)[1]
  if first then
    bound = math.min(bound, id_ms(first[1]))
    owed = 1
  end
  local last_delivered
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    for i = 1, #g, 2 do
      if g[i] == 'name' and g[i + 1] ~= ARGV[2] then break end
      if g[i] == 'last-delivered-id' then last_delivered = g[i + 1] end
    end
  end
  -- The first entry after last-delivered-id is the oldest undelivered one.
  local undelivered = last_delivered and
    redis.call('XRANGE', KEYS[1], '(' .. last_delivered, '+', 'COUNT', 1)[1]
  if undelivered then
    bound = math.min(bound, id_ms(undelivered[1]))
    owed = 1
  end
  -- Entries in the bound's own millisecond stay: MINID keeps ids >= bound-0.  Whole stream
  -- nodes first (cheap, bounded by the limit); then, if that went all the way, the few settled
  -- entries left in the node the bound falls in (at most a node's worth: exact MINID trims
  -- take no LIMIT), so a settled stream ends up empty.
  trimmed = redis.call('XTRIM', KEYS[1], 'MINID', '~', bound, 'LIMIT', limit)
  if trimmed < limit then
    trimmed = trimmed + redis.call('XTRIM', KEYS[1], 'MINID', bound)
  end
end

local excess = redis.call('XLEN', KEYS[2]) - cap
if excess > 0 then
  local most = math.min(excess, limit, 1000)
  for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', most)) do
    local id = ready_fields(entry[2])
    local v = id and redis.call('HGET', KEYS[3], id)
    if v and string.sub(v, 1, 1) == 'D' then
      redis.call('HDEL', KEYS[3], id)
      redis.call('HDEL', KEYS[4], id)
    end
    redis.call('XDEL', KEYS[2], entry[1])
    dropped = dropped + 1
  end
  count(KEYS[5], 'dead_dropped', dropped)
end
return {trimmed, dropped, owed}
