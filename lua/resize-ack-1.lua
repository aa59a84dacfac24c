--[[ resize-ack: drop the batch a resize took out of a partition (lua/resize-take-10.lua) once
every partition it went to has stored it (lua/resize-put-9.lua).

KEYS[1] moving   hash    the batch taken out; '' -> its batch id

ARGV[1] batch id

Returns {1} dropped, {0} the partition holds no batch of that id (dropped before)

Flags: allow-oom  (it frees memory)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'hash'})
if wrong then return wrong end
if redis.call('HGET', KEYS[1], '') ~= ARGV[1] then return {0} end
redis.call('DEL', KEYS[1])
return {1}
