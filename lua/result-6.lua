--[[ result: one job's snapshot and its kept result, read together (a job settles between two
separate reads: read apart, a job gone and no result yet could not be told from one unknown).

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error
KEYS[4] ctl      hash    the partition's flags (read: sealed by a resize)
KEYS[5] moving   hash    the batch a resize has taken out of this partition (job id -> record)
KEYS[6] result   string  the job's result record, '<finished ms>|<record JSON>' (complete-5)

ARGV[1] job id

Returns {envelope or false, due ms or false, last error or false, result or false} (the first
three as lua/get-6.lua; the result is read up to MAX_RESULT_BYTES + STAMP_BYTES, the most
complete-5 writes, and one longer, which no worker wrote, is answered as that length + 1, a
number, not the text), or get-6's error replies:
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED
  {-17, id}                           E_JOB_MOVING
Flags: no-writes  (reads only)
]]
--@include snapshot.lua

local wrong = wrong_type({KEYS[6], 'string'})
if wrong then return wrong end
local most = MAX_RESULT_BYTES + STAMP_BYTES
local result = redis.call('GETRANGE', KEYS[6], 0, most)
if result == '' then
  result = false
elseif #result > most then
  result = most + 1
end
local snapshot = job_snapshot(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1])
if type(snapshot[1]) == 'number' then
  -- Sealed: a result written here before the resize still answers (the job is gone).
  if result and snapshot[1] == -16 then return {false, false, false, result} end
  return snapshot
end
snapshot[4] = result or false
return snapshot
