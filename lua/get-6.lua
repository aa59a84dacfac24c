--[[ get: a consistent snapshot of one job.

KEYS[1] jobs     hash    job id -> envelope
KEYS[2] due      zset    job id (or '<id> <body>', a compact job) scored by due ms
KEYS[3] errors   hash    job id -> last error
KEYS[4] ctl      hash    the partition's flags (read: sealed by a resize)
KEYS[5] moving   hash    the batch a resize has taken out of this partition (job id -> record)
KEYS[6] progress string  the job's last reported progress (lua/progress-2.lua)

ARGV[1] job id

Returns {envelope or nil, due ms or nil, last error or nil, progress or nil} (a compact job's envelope is
'S0|<body>', as promote will write it).  The progress is read up to MAX_PROGRESS_BYTES +
STAMP_BYTES, the most progress-2 writes; a longer one, which no worker wrote, is answered as
that length + 1, a number, not the text.  The due time is the score as Redis keeps it, text
('inf' or '1.5' when written by hand): the reader checks it and shows a bad one as malformed
(shardq.store.numbers), rather than this reply turning it into a time it is not.

A job not here in a partition a resize sealed: its record in 'moving' as above, or
  {-16, '<generation>:<partitions>', id}  E_LAYOUT_MOVED: not here, and a resize sealed this
                                      partition (lua/includes/resize.lua): ask that generation
  {-17, id}                           E_JOB_MOVING: a resize is moving it: ask again shortly
Flags: no-writes  (reads only)
]]
--@include snapshot.lua

local wrong = wrong_type({KEYS[6], 'string'})
if wrong then return wrong end
local snapshot = job_snapshot(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1])
-- Progress only of a job stored here and running (a stale one of an earlier attempt is not
-- its progress now).
if type(snapshot[1]) == 'string' and string.sub(snapshot[1], 1, 1) == 'A' then
  local most = MAX_PROGRESS_BYTES + STAMP_BYTES
  local progress = redis.call('GETRANGE', KEYS[6], 0, most)
  if progress == '' then
    snapshot[4] = false
  elseif #progress > most then
    snapshot[4] = most + 1
  else
    snapshot[4] = progress
  end
end
return snapshot
