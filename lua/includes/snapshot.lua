--@include checks.lua
--@include compact.lua
--@include resize.lua
-- job_snapshot(jobs, due, errors, ctl, moving, id): one job as lua/get-6.lua returns it
-- (see there): {envelope or false, due or false, last error or false}, or an error reply.
-- Shared by get-6 and result-6.
local function job_snapshot(jobs, due, errors, ctl, moving, id)
  local wrong = wrong_type({jobs, 'hash', due, 'zset', errors, 'hash', ctl, 'hash',
    moving, 'hash'})
  if wrong then return wrong end
  local v = redis.call('HGET', jobs, id)
  if not v then
    local member, score = compact_find(due, id)
    if not member then
      local record = redis.call('HGET', moving, id)
      if record then
        local r = cjson.decode(record)
        if r.m then return {'S0|' .. select(2, split_member(r.m)), tostring(r.s), false} end
        return {r.e, r.k == 'j' and tostring(r.s) or false, r.r or false}
      end
      local to = sealed_to(ctl)
      if to then return {-16, to, id} end
      return {false, false, false}
    end
    local _, body = split_member(member)
    return {'S0|' .. body, score, false}
  end
  local score = redis.call('ZSCORE', due, id)
  return {v, score or false, redis.call('HGET', errors, id)}
end
