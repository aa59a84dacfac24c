--[[ batch-seal: close an open batch to new children; it ends once every child has ended.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children

ARGV[1] the batch id (for the error replies)

Returns
  {1, ended ms, name, body, extra, ...}
                                      sealed (or already sealed: a resent seal): when it ended
                                      (0 while it runs), and the fires the caller has to do now
                                      (every child had already ended): lua/includes/batch.lua
                                      pending_fires
  {-18, batch id}                     E_BATCH_NOT_FOUND: never created, or expired

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include now.lua
--@include checks.lua
--@include batch.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {-18, ARGV[1]} end
local now = now_ms()
if state == 'open' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'sealed', now)
  end_if_done(KEYS, now)
  expire_when_settled(KEYS)
end
local out = {1, tonumber(redis.call('HGET', KEYS[1], 'ended')) or 0}
for _, v in ipairs(pending_fires(KEYS[1])) do out[#out + 1] = v end
return out
