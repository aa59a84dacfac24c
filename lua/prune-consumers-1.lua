--[[ prune-consumers: drop consumers of crashed workers from a ready stream's group.

A worker killed with SIGKILL never retires its consumer name.  Once reclaim has taken its
deliveries (pending 0) and it has been idle past ARGV[2], it is removed.  Nothing can be lost:
only consumers holding no pending entry are deleted, and a live worker that happens to be
idle that long is recreated by its next read.

KEYS[1] ready    stream  due jobs

ARGV[1] consumer group
ARGV[2] idle ms after which an empty consumer is removed

Returns the number of consumers removed
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local threshold, bad = arg_number(2, 0, 1e12)
if bad then return bad end
local wrong = wrong_type({KEYS[1], 'stream'})
if wrong then return wrong end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local removed = 0
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if info['pending'] == 0 and info['idle'] >= threshold then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed = removed + 1
  end
end
return removed
