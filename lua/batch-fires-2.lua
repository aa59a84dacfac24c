--[[ batch-fires: what a batch's end still calls for, read only.

For the sweep of the relay (shardq.dispatcher.relay): a producer that died after the call
that ended a batch (seal, cancel) and before doing its fires left them listed in the record;
the sweep does them (each is idempotent) and takes them off with lua/batch-fired-2.lua.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children (not read: the batch's keys go together)

Returns
  {state, ended ms (0 while it runs), name, body, extra, ...}
                                      the fires still to do (lua/includes/batch.lua
                                      pending_fires)
  {}                                  no such batch (expired, or never created)

Flags: no-writes
]]
--@include checks.lua
--@include batch.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local r = redis.call('HMGET', KEYS[1], 'state', 'ended')
if not r[1] then return {} end
local out = {r[1], tonumber(r[2]) or 0}
for _, v in ipairs(pending_fires(KEYS[1])) do out[#out + 1] = v end
return out
