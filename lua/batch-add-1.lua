--[[ batch-add: reserve indexes for children added to an open batch.

The producer then enqueues the children with these indexes (their job ids are
'<batch id>#<index>'); the batch cannot end before it is sealed (lua/batch-seal-2.lua).

KEYS[1] batch    hash    the record (lua/includes/batch.lua)

ARGV[1] children to add: 1..100000
ARGV[2] the batch id (for the error replies)

Returns
  {1, first index}                    reserved: indexes first .. first + ARGV[1] - 1
  {-18, batch id}                     E_BATCH_NOT_FOUND: never created, or expired
  {-19, batch id, state}              E_BATCH_CLOSED: sealed, ended or cancelled
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.
]]
--@include checks.lua

local n, bad = arg_number(1, 1, 100000)
if bad then return bad end
local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {-18, ARGV[2]} end
if state ~= 'open' then return {-19, ARGV[2], state} end
local total = redis.call('HINCRBY', KEYS[1], 'total', n)
return {1, total - n}
