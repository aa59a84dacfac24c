--[[ batch-open: create a batch or chain record (lua/includes/batch.lua), once.

KEYS[1] batch    hash    the record
KEYS[2] seen     string  bitmap: bit i set once child i's end was counted

ARGV[1] kind                                                       one of batch|chain
ARGV[2] policy for a dead child                                    one of fail|continue|ignore
ARGV[3] retention ms once it ended (30 days at most)               number 1..2592000000
ARGV[4] children known now: 0..MAX_CHILDREN (a chain's steps: 1..MAX_STEPS); its bitmap is
        allocated here, so the settling scripts (allow-oom) never grow it
ARGV[5] '1': sealed now (no child may be added); '0': open         flag
        (lua/batch-add-2.lua, batch-seal-2)
ARGV[6] parent '<batch id>|<index>' when this batch is a child of another, else ''
ARGV[7..] pairs of (field, value): 'cb:success' / 'cb:complete' /  groups of 2
        'cb:failure' and a callback job's body, 'step:<i>' (1 <= i < ARGV[4]) and a chain
        step's body; no other field
Max ARGV: 2206  = 6 + 2 per callback (3) and step (at most 1000), and 200 spare

Returns
  {1, now ms}                         created
  {0, state, total, kind}             already there (a resent create: the caller checks it is its
                                      own and goes on with the children)
]]
--@include now.lua
--@include checks.lua

-- The bounds the producer checks (shardq.workflows): a count past them would have the bitmap
-- allocate up to 512 MiB in one call.  Checked here: they depend on the kind (ARGV[1]).
local chain = ARGV[1] == 'chain'
local lo, hi = chain and 1 or 0, chain and MAX_STEPS or MAX_CHILDREN
local total = int_of(ARGV[4], lo, hi)
if not total then return {-11, 4, ARGV[4], lo, hi} end
-- Only the fields listed above (a step's index depends on ARGV[4]): a pair may not set the
-- counts or the bitmap's size.
for i = 7, #ARGV, 2 do
  local name = ARGV[i]
  local cb = string.match(name, '^cb:(%a+)$')
  local step = chain and int_of(string.match(name, '^step:(%d+)$'), 1, total - 1)
  if not (cb == 'success' or cb == 'complete' or cb == 'failure' or step) then
    return {-11, i, name, 'cb:success', 'step:' .. (total - 1)}
  end
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local there = redis.call('HMGET', KEYS[1], 'state', 'total', 'kind')
if there[1] then return {0, there[1], there[2] or '0', there[3] or ''} end
local now = now_ms()
redis.call('DEL', KEYS[2])
-- One bit per child, allocated now, while Redis refuses this call at maxmemory; 'bits' says
-- how many (lua/includes/batch.lua).
if total > 0 then redis.call('SETBIT', KEYS[2], total - 1, 0) end
redis.call('HSET', KEYS[1], 'kind', ARGV[1], 'state', ARGV[5] == '1' and 'running' or 'open',
  'total', total, 'bits', total, 'ok', 0, 'dead', 0, 'cancelled', 0, 'policy', ARGV[2],
  'created', now, 'retention', ARGV[3], 'parent', ARGV[6])
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'sealed', now) end
for i = 7, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return {1, now}
