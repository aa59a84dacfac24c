--[[ retire: remove a worker's consumer from a ready stream's group, only if it holds nothing.

XGROUP DELCONSUMER drops the consumer's pending entries with it, which would lose their jobs,
so it runs only when the consumer has no pending entry at all.

KEYS[1] ready    stream  due jobs

ARGV[1] consumer group
ARGV[2] consumer (worker) name

Returns 1 removed, 0 kept (it still has pending entries, which reclaim will pick up)

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream'})
if wrong then return wrong end
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local mine = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if mine[1] then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
