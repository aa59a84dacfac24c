--[[ batch-fired: the relay did these fires (enqueued a callback or the next chain step,
reported to the parent batch): take them off the record's list.

Each fire is idempotent on its own (a callback's or step's job id is derived from the batch id
and enqueued with it as its idempotency key; a parent report sets a bit), so a relay that dies
before this call does them again harmlessly.  Once the batch ended and nothing is left to fire,
its keys expire after its retention.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children

ARGV[1..] the names of the fires done
Max ARGV: 1010

Returns the number of fires still to do.
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (it settles: a full Redis must still count ends and end batches)
]]
--@include checks.lua
--@include batch.lua

local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local fires = redis.call('HGET', KEYS[1], 'fires')
if not fires then return 0 end
local done = {}
for i = 1, #ARGV do done[ARGV[i]] = true end
local left = {}
for name in string.gmatch(fires, '%S+') do
  if not done[name] then left[#left + 1] = name end
end
redis.call('HSET', KEYS[1], 'fires', table.concat(left, ' '))
expire_when_settled(KEYS)
return #left
