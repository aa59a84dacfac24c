--[[ batch-add: reserve indexes for children added to an open batch.

The producer then enqueues the children with these indexes (their job ids are
'<batch id>#<index>'); the batch cannot end before it is sealed (lua/batch-seal-2.lua).  With
an add id, the reservation is kept in the record ('add:<add id>' = '<first>|<count>'), so a
producer that died half-way through enqueueing calls again with the same add id, gets the same
indexes back, and fills the ones it had not (even after the batch was sealed meanwhile);
without one, a call that dies half-way leaves its indexes unfilled and the batch can only be
cancelled.

KEYS[1] batch    hash    the record (lua/includes/batch.lua)
KEYS[2] seen     string  bitmap of counted children: grown here by the added children's bits
        (while Redis refuses this call at maxmemory), so the settling scripts never grow it

ARGV[1] children to add (and at most MAX_TOTAL in all)  int 1..MAX_ADD as n
ARGV[2] the batch id (for the error replies)
ARGV[3] the add id ('' for none): 1-64 characters, no '|'

Returns
  {1, first index}                    reserved now: indexes first .. first + ARGV[1] - 1
  {2, first index}                    reserved before under this add id (a resend): the same
  {-18, batch id}                     E_BATCH_NOT_FOUND: never created, or expired
  {-19, batch id, state}              E_BATCH_CLOSED: sealed, ended or cancelled (a resend:
                                      cancelled, or ended, so every child was counted)
  {-11, 1, count, lo, hi}             E_BAD_ARGUMENT also for a resend with another count, or
                                      more children than MAX_TOTAL in all
  {-10, batch, 'total ...', ...}      E_WRONG_TYPE also when the record's total is not a whole
                                      number
]]
--@include checks.lua

-- A pattern, not a bound: checked here.
local add_id = ARGV[3] or ''
if #add_id > 64 or string.find(add_id, '|', 1, true) then
  return {-11, 3, add_id, '1 character', '64 characters, no |'}
end
local wrong = wrong_type({KEYS[1], 'hash', KEYS[2], 'string'})
if wrong then return wrong end
local r = redis.call('HMGET', KEYS[1], 'state', 'total')
local state = r[1]
if not state then return {-18, ARGV[2]} end
if add_id ~= '' then
  local reserved = redis.call('HGET', KEYS[1], 'add:' .. add_id)
  if reserved then
    local first, count = string.match(reserved, '^(%d+)|(%d+)$')
    if tonumber(count) ~= n then return {-11, 1, ARGV[1], count, count} end
    if state ~= 'open' and state ~= 'running' then return {-19, ARGV[2], state} end
    return {2, tonumber(first)}
  end
end
if state ~= 'open' then return {-19, ARGV[2], state} end
local before = int_of(r[2], 0, MAX_TOTAL)
if not before then return {-10, KEYS[1], 'total ' .. tostring(r[2]), 'a whole number'} end
if before + n > MAX_TOTAL then return {-11, 1, ARGV[1], 1, MAX_TOTAL - before} end
local total = before + n
redis.call('SETBIT', KEYS[2], total - 1, 0)
redis.call('HSET', KEYS[1], 'total', string.format('%d', total), 'bits', string.format('%d', total))
if add_id ~= '' then
  redis.call('HSET', KEYS[1], 'add:' .. add_id, string.format('%d|%d', before, n))
end
return {1, before}
