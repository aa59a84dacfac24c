--[[ touch: a live worker's heartbeat on the deliveries it is running.

Resets each delivery's idle time, so reclaim leaves it alone however long the handler runs,
but only while the delivery still belongs to this worker: one that was reclaimed meanwhile (the
worker was paused past the visibility timeout) is reported lost and left with its new owner.

Also says which of those jobs were cancelled while running (lua/cancel-7.lua): a delivery
still this worker's whose job has no envelope any more.  That is what a cancel does, and a
signal alone is not: anyone may publish 'cancel:<id>' on the ready-hint channel and a
producer may write the cancels set, so neither stops a job by itself.  The envelopes are
looked for (HEXISTS: a body is never copied) when ARGV[3] is '1' (a cancel's publish named
one of these jobs) or the partition's cancels set is not empty (a recent running cancel,
whose publish may have been missed): one EXISTS is all a heartbeat of a partition without
cancels pays.

KEYS[1] ready    stream  due jobs
KEYS[2] cancels  zset    running jobs cancelled, by cancel time (lua/cancel-7.lua): read only
                         whether it exists
KEYS[3] jobs     hash    job id -> envelope (HEXISTS only)

ARGV[1] consumer group
ARGV[2] consumer (worker) name
ARGV[3] '1': read the envelopes whatever the cancels set holds; '0':  flag
        only when it exists
ARGV[4..] pairs of (entry id, job id) of the deliveries               groups of 2
Max ARGV: 2003  = 3 + 2 per delivery: at most 1000 (shardq.store.delivery.MAX_TOUCH)

Returns {lost, cancelled}: lost, the entry ids now pending under another consumer (an entry no
longer pending at all was settled meanwhile: its ack raced this heartbeat, not reported);
cancelled, the job ids of the deliveries still this worker's whose job was cancelled (above),
for the worker to stop them.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'zset', KEYS[3], 'hash'})
if wrong then return wrong end
local lost = {}
local cancelled = {}
if redis.call('EXISTS', KEYS[1]) == 0 then return {lost, cancelled} end
local look = ARGV[3] == '1' or redis.call('EXISTS', KEYS[2]) == 1
for i = 4, #ARGV, 2 do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if p then
    if p[2] == ARGV[2] then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
      if look and redis.call('HEXISTS', KEYS[3], ARGV[i + 1]) == 0 then
        cancelled[#cancelled + 1] = ARGV[i + 1]
      end
    else
      lost[#lost + 1] = ARGV[i]
    end
  end
end
return {lost, cancelled}
