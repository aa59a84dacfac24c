--[[ batch-open: create a batch or chain record (lua/includes/batch.lua), once.

KEYS[1] batch    hash    the record
KEYS[2] seen     string  bitmap: bit i set once child i's end was counted

ARGV[1] kind: 'batch' or 'chain'
ARGV[2] policy for a dead child: 'fail', 'continue' or 'ignore'
ARGV[3] retention ms once it ended (1..30 days)
ARGV[4] children (a chain's steps) known now: 0..4294967295
ARGV[5] '1': sealed now (no child may be added); '0': open (lua/batch-add-1.lua, batch-seal-2)
ARGV[6] parent '<batch id>|<index>' when this batch is a child of another, else ''
ARGV[7..] pairs of (field, value): 'cb:success' / 'cb:complete' / 'cb:failure' and a callback
        job's body, 'step:<i>' and a chain step's body
Max ARGV: 2206  = 6 + 2 per callback (3) and step (at most 1000), and 200 spare

Returns
  {1, now ms}                         created
  {0, state, total, kind}             already there (a resent create: the caller checks it is its
                                      own and goes on with the children)
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.
]]
--@include now.lua
--@include checks.lua

if ARGV[1] ~= 'batch' and ARGV[1] ~= 'chain' then return {-11, 1, ARGV[1], 'batch', 'chain'} end
if ARGV[2] ~= 'fail' and ARGV[2] ~= 'continue' and ARGV[2] ~= 'ignore' then
  return {-11, 2, ARGV[2], 'fail', 'ignore'}
end
local _, bad3 = arg_number(3, 1, 2592000000)
if bad3 then return bad3 end
local _, bad4 = arg_number(4, 0, 4294967295)
if bad4 then return bad4 end
if ARGV[5] ~= '0' and ARGV[5] ~= '1' then return {-11, 5, ARGV[5], '0', '1'} end
if (#ARGV - 6) % 2 ~= 0 then return {-11, #ARGV, 'argument count', 6, #ARGV + 1} end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local there = redis.call('HMGET', KEYS[1], 'state', 'total', 'kind')
if there[1] then return {0, there[1], there[2] or '0', there[3] or ''} end
local now = now_ms()
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'kind', ARGV[1], 'state', ARGV[5] == '1' and 'running' or 'open',
  'total', ARGV[4], 'ok', 0, 'dead', 0, 'cancelled', 0, 'policy', ARGV[2], 'created', now,
  'retention', ARGV[3], 'parent', ARGV[6])
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'sealed', now) end
for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return {1, now}
