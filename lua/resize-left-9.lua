--[[ resize-left: what a partition a resize empties still holds, to tell when it is empty.

KEYS[1] due      zset    waiting jobs
KEYS[2] lane     zset    due-now jobs waiting for fetch
KEYS[3] moving   hash    the batch taken out and not yet dropped
KEYS[4] dead     stream  dead letters
KEYS[5] sched    hash    schedules
KEYS[6] jobs     hash    envelopes: of ready and running jobs (and dead ones)
KEYS[7] ready    stream  due jobs (entries not yet delivered: 'lag')
KEYS[8] ctl      hash    the partition's flags
KEYS[9] outbox   hash    workflow children's ends not yet relayed to their batches

Returns {due, lane, moving, dead, schedules, jobs, undelivered, pending, sealed, outbox}
  undelivered: 1 when an entry after the group's last delivered one is left, else 0;
  sealed: '' when not; outbox: its entries (the partition's dispatcher relays them: a
  partition is not empty, so not retired, before its outbox is)
It reads only, but is the admin's (the resize driver's), so it is not flagged no-writes: the
viewer's FCALL_RO does not reach it.

Flags: allow-oom  (it reads only: a resize of a full Redis must see how far it got)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'stream',
  KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'stream', KEYS[8], 'hash', KEYS[9], 'hash'})
if wrong then return wrong end
local function lag_and_pending()
  if redis.call('EXISTS', KEYS[7]) == 0 then return 0, 0 end
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[7])) do
    local g = {}
    for i = 1, #group, 2 do g[group[i]] = group[i + 1] end
    if g['name'] == 'workers' then
      local after = redis.call('XRANGE', KEYS[7], '(' .. g['last-delivered-id'], '+', 'COUNT', 1)
      return #after, g['pending']
    end
  end
  return redis.call('XLEN', KEYS[7]), 0
end
local lag, pending = lag_and_pending()
local moving = redis.call('HLEN', KEYS[3])
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), moving,
  redis.call('XLEN', KEYS[4]), redis.call('HLEN', KEYS[5]), redis.call('HLEN', KEYS[6]), lag,
  pending, redis.call('HGET', KEYS[8], 'sealed') or '', redis.call('HLEN', KEYS[9])}
