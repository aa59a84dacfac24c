--[[ lanes: turn a partition's lanes (priorities and fair sharing, lua/includes/lanes.lua) on or
off.  With them on, enqueue and promote put due jobs in the lane instead of the ready stream;
with them off, they append to the stream again.  The operator's (and admin's) only.

Turned off while jobs wait in the lane, the flag reads '2': fetch goes on reading the lane
while it exists, so those jobs are still delivered.  Only the operator writes the flag, so
nobody else drops it: turning lanes off again once the lane is empty sets '0' (a lane empty
when lanes are turned off gets no '2' at all).

The flag is the 'lanes' field of the partition's control hash, which enqueue, promote and fetch
already read (KEYS of their own) and only the operator and admin roles may write; a partition
of a queue created before the control hash (layout < 4, not yet upgraded) keeps it in its stats
hash, where its readers look.  A partition without lanes never touches its lane keys.

KEYS[1] ctl      hash    the partition's flags
KEYS[2] stats    hash    counters (and the flags of a queue of layout < 4)
KEYS[3] lane     zset    due jobs waiting for fetch (whether it holds any is read)

ARGV[1] '1' to turn lanes on, '0' to turn them off  flag

Returns {1 when the state changed (on <-> off), else 0}
  {-14, role, key}                    E_NOT_PERMITTED: the caller may not write the control hash

Flags: allow-oom  (an operator step that writes one field; a full Redis must stay steerable)
]]
--@include checks.lua
--@include lanes.lua

local denied = operator_only(KEYS[1], KEYS[2])
if denied then return denied end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[3], 'zset'})
if wrong then return wrong end
local flags = flags_key(KEYS[1], KEYS[2])
wrong = wrong_type({flags, 'hash'})
if wrong then return wrong end
local was = redis.call('HGET', flags, 'lanes')
if ARGV[1] == '1' then
  if was == '1' then return {0} end
  redis.call('HSET', flags, 'lanes', '1')
  return {1}
end
if was == '1' or was == '2' then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HSET', flags, 'lanes', '2')
  else
    -- off: '0' where the control hash is in use (the field marks it), absent in a stats hash
    if flags == KEYS[1] then
      redis.call('HSET', flags, 'lanes', '0')
    else
      redis.call('HDEL', flags, 'lanes')
    end
  end
end
return {(was == '1') and 1 or 0}
