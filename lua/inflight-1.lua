--[[ inflight: deliveries each worker holds in one partition (its consumer group's consumers).

Bounded by the number of consumers (workers that read this partition).

KEYS[1] ready    stream  due jobs

ARGV[1] consumer group

Returns {worker, pending deliveries, ...}
Flags: no-writes  (reads only)
]]
--@include checks.lua

local wrong = wrong_type({KEYS[1], 'stream'})
if wrong then return wrong end
local out = {}
if redis.call('EXISTS', KEYS[1]) == 0 then return out end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  for i = 1, #g, 2 do
    if g[i] == 'name' and g[i + 1] == ARGV[1] then
      for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
        local name, pending
        for j = 1, #c, 2 do
          if c[j] == 'name' then name = c[j + 1] elseif c[j] == 'pending' then pending = c[j + 1] end
        end
        if name and pending and pending > 0 then
          out[#out + 1] = name
          out[#out + 1] = pending
        end
      end
    end
  end
end
return out
