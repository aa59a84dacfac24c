--[[ complete: settle succeeded jobs that keep their result or belong to a workflow.

As ack-4.lua, and for each settled job: its result record stored under its own result key,
expiring after the job's retention (no sweeper: Redis expires it), and published on the key's
name (sharded pub/sub, the partition's slot) for a producer waiting on it (shardq.plans.results);
and, for a workflow child (batch or chain step), its end written into the partition's outbox
(lua/includes/outbox.lua) for the dispatcher to relay to the batch.  Jobs that need neither go
through ack-4 or ride with a fetch: a queue that uses neither never calls this.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters
KEYS[5] outbox   hash    workflow children's ends not yet relayed: job id -> report
KEYS[6..] result string  one per job, in ARGV's order: '<finished ms>|<record JSON>' (a job
        that keeps no result names its result key all the same; it is not touched)
Max KEYS: 105  = 5 + 1 per job: at most 100 jobs (shardq.store.delivery.MAX_COMPLETE)

ARGV[1] consumer group
ARGV[2] the partition's due-hint channel: told 'o' when an outbox entry is written
ARGV[3..] 6 per job, as many jobs as result keys                       groups of 6
ARGV[i]   entry id
ARGV[i+1] job id                                                       name
ARGV[i+2] retention ms: 0 keeps no result (at most                     number 0..2592000000
          shardq.jobs.MAX_RESULT_RETENTION, 30 days)
ARGV[i+3] the result record (JSON written by the worker, opaque here:  bytes 0..MAX_RESULT_BYTES
          shardq.store.results; '' when none)
ARGV[i+4] the workflow ref '<batch id>|<index>' ('' for a job of no    bytes 0..MAX_NAME_BYTES
          workflow)
ARGV[i+5] the value the report carries (a chain step's record; ''      bytes 0..MAX_RESULT_BYTES
          otherwise)
A call's records together are at most MAX_RESULT_BYTES too (the worker sends a larger batch in
several calls: shardq.store.results.MAX_COMPLETE_BYTES).
Max ARGV: 602  = 2 + 6 per job

Returns the number of jobs settled.  An entry no longer pending (reclaimed and settled by another
worker, or dead-lettered as poison meanwhile) is not counted and writes no result or report.

What a call keeps is bounded by these caps: it runs at maxmemory.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua
--@include acks.lua
--@include outbox.lua

-- The result keys are not type-checked: SET replaces whatever a key holds, so none can fail
-- the call half-way (a TYPE probe per job was a third of what keeping a result cost).
local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[5], 'hash'})
if wrong then return wrong end
-- Checked here, as they span arguments (the header's are checked before): one job per
-- result key, and the call's records together within MAX_RESULT_BYTES.
if (#ARGV - 2) ~= 6 * (#KEYS - 5) then return {-11, #ARGV, 'argument count', 2, 6 * (#KEYS - 5) + 2} end
local records = 0
for i = 6, #ARGV, 6 do
  records = records + #ARGV[i]
  if records > MAX_RESULT_BYTES then
    return {-11, i, 'a result of ' .. #ARGV[i] .. ' bytes', 0, MAX_RESULT_BYTES}
  end
end
local now = now_ms()
local ready, jobs, errors, stats, outbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local ids = {}
local kept = 0
local n = 0
for i = 3, #ARGV, 6 do
  n = n + 1
  if redis.call('XACK', ready, ARGV[1], ARGV[i]) == 1 then
    local id = ARGV[i + 1]
    ids[#ids + 1] = id
    if ARGV[i + 2] ~= '0' then
      local key = KEYS[5 + n]
      redis.call('SET', key, now .. '|' .. ARGV[i + 3], 'PX', ARGV[i + 2])
      redis.call('SPUBLISH', key, 'done')
      kept = kept + 1
    end
    if ARGV[i + 4] ~= '' then outbox_put(outbox, ARGV[2], id, ARGV[i + 4], 'ok', now, ARGV[i + 5]) end
  end
end
if kept > 0 then count(stats, 'results', kept) end
return drop_settled(jobs, errors, stats, ids)
