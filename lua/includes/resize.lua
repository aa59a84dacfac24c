-- Resizing a queue (shardq.admin.resize, docs/design/resize.md).  A resize moves every job of
-- the generation it empties into the new one.  It first SEALS each old partition: its
-- control hash's 'sealed' is '<generation>:<partitions>' of the generation its jobs go to.
-- A sealed partition takes no new job (enqueue answers E_LAYOUT_MOVED with that generation,
-- and the producer sends the job there), and a by-id call that does not find its job here says
-- where to look next: E_JOB_MOVING while the job is in this partition's 'moving' hash (the
-- batch a resize has taken out and not yet seen stored in its new partition), else
-- E_LAYOUT_MOVED.  After the resize commits, the control hash stays as that tombstone.

-- sealed_to(ctl): '<generation>:<partitions>' this partition's jobs move to, or nil.
local function sealed_to(ctl)
  return redis.call('HGET', ctl, 'sealed')
end

-- not_here(ctl, moving, id): the reply of a by-id call that did not find its job:
-- {-17, id} E_JOB_MOVING, {-16, '<generation>:<partitions>', id} E_LAYOUT_MOVED, or
-- {-6, id} E_JOB_NOT_FOUND.
local function not_here(ctl, moving, id)
  if redis.call('HEXISTS', moving, id) == 1 then return {-17, id} end
  local to = sealed_to(ctl)
  if to then return {-16, to, id} end
  return {-6, id}
end
