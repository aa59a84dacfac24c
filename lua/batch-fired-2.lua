--[[ batch-fired: the relay did these fires (enqueued a callback or the next chain step,
reported to the parent batch): take them off the record's list.

Each fire is idempotent on its own (a callback's or step's job id is derived from the batch id
and enqueued with it as its idempotency key; a parent report sets a bit), so a relay that dies
before this call does them again harmlessly.  Once the batch ended and nothing is left to fire,
its keys expire after its retention.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children

ARGV[1..] the names of the fires done; '<name>!<error>' for one that cannot be done and is
          given up (a callback whose job its queue refuses for good: the queue was deleted, a
          priority callback on a queue whose lanes are off, ...): it is taken off the list and
          the error kept in the record's 'fire_errors', for `shardq batch get` to show
Max ARGV: 1010

Returns
  {left, ended ms}                    the number of fires still to do, and when the batch ended
                                      (0 while it runs)

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include now.lua
--@include checks.lua
--@include batch.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local fires = redis.call('HGET', KEYS[1], 'fires')
if not fires then return {0, tonumber(redis.call('HGET', KEYS[1], 'ended')) or 0} end
local listed = {}
for name in string.gmatch(fires, '%S+') do listed[name] = true end
local done = {}
local errors = {}
for i = 1, #ARGV do
  local name, err = string.match(ARGV[i], '^([^!]*)!(.*)$')
  if not name then name = ARGV[i] end
  -- A resent call (its fires already taken off) records nothing again.
  if listed[name] and not done[name] then
    done[name] = true
    if err then errors[#errors + 1] = name .. ': ' .. string.sub(err, 1, 300) end
  end
end
if #errors > 0 then
  local before = redis.call('HGET', KEYS[1], 'fire_errors')
  local text = table.concat(errors, '\n')
  if before and before ~= '' then text = before .. '\n' .. text end
  redis.call('HSET', KEYS[1], 'fire_errors', string.sub(text, 1, 4000))
end
local left = {}
for name in string.gmatch(fires, '%S+') do
  if not done[name] then left[#left + 1] = name end
end
redis.call('HSET', KEYS[1], 'fires', table.concat(left, ' '))
if #left == 0 and redis.call('HEXISTS', KEYS[1], 'ended') == 1 then
  -- When what the batch's end called for was done (the callbacks enqueued): shown by
  -- `shardq batch get`, and the callback lag is measured against it.
  redis.call('HSETNX', KEYS[1], 'fired', now_ms())
end
expire_when_settled(KEYS)
return {#left, tonumber(redis.call('HGET', KEYS[1], 'ended')) or 0}
