--[[ prune-consumers: drop consumers of crashed workers from a ready stream's group.

A worker killed with SIGKILL never retires its consumer name.  Once reclaim has taken its
deliveries (pending 0) and it has been idle past ARGV[2], it is removed.  Nothing can be lost:
only consumers holding no pending entry are deleted, and a live worker that happens to be
idle that long is recreated by its next read.

KEYS[1] ready    stream  due jobs

ARGV[1] consumer group
ARGV[2] idle ms after which an empty consumer is removed  number 0..1e12 as threshold

Returns the number of consumers removed

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

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
