--[[ complete: settle jobs whose handlers succeeded and that keep their result.

As ack-4.lua, and each settled job's result record is stored under its own result key,
expiring after the job's retention (no sweeper: Redis expires it), and published on the key's
name (sharded pub/sub, the partition's slot) for a producer waiting on it
(shardq.plans.results).  Jobs that keep no result go through ack-4 or ride with a fetch: a
queue that keeps none never calls this.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters
KEYS[5..] result string  one per job, in ARGV's order: '<finished ms>|<record JSON>'
Max KEYS: 104  = 4 + 1 per job: at most 100 jobs (shardq.store.delivery.MAX_COMPLETE)

ARGV[1] consumer group
ARGV[2..] 4 per job: entry id, job id, retention ms (1..shardq.jobs.MAX_RESULT_RETENTION), the
        result record (JSON written by the worker, opaque here: shardq.store.results)
Max ARGV: 401  = 1 + 4 per job

Returns the number of jobs settled.  An entry no longer pending (reclaimed and settled by another
worker, or dead-lettered as poison meanwhile) is not counted and writes no result.
  {-10, key, found, expected}         E_WRONG_TYPE: a key was overwritten outside shardq
  {-11, argv index, value, lo, hi}    E_BAD_ARGUMENT
  {-15, 'KEYS' or 'ARGV', n, cap}    E_TOO_MANY_ARGUMENTS: before anything else (store/loader.py)
Every check comes before the first write: a refused call writes nothing.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include now.lua
--@include checks.lua
--@include acks.lua

-- The result keys are not type-checked: SET replaces whatever a key holds, so none can fail
-- the call half-way (a TYPE probe per job was a third of what keeping a result cost).
local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash'})
if wrong then return wrong end
if (#ARGV - 1) ~= 4 * (#KEYS - 4) then return {-11, #ARGV, 'argument count', 1, 4 * (#KEYS - 4) + 1} end
-- The bound is shardq.jobs.MAX_RESULT_RETENTION (30 days).
for i = 4, #ARGV, 4 do
  local _, bad = arg_number(i, 1, 2592000000)
  if bad then return bad end
end
return complete_entries(KEYS, ARGV[1], 2, now_ms())
