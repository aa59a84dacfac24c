--[[ ack: settle jobs whose handlers succeeded: acknowledge and drop the envelope.

Acks usually ride with the partition's next read instead (fetch-9.lua's ARGV[6..]); this one
is for acks that waited long enough for one (shardq.worker.settler.ACK_LINGER) and shutdown.
The settling itself is lua/includes/acks.lua.

KEYS[1] ready    stream  due jobs
KEYS[2] jobs     hash    job id -> envelope
KEYS[3] errors   hash    job id -> last error
KEYS[4] stats    hash    counters

ARGV[1] consumer group
ARGV[2..] pairs of (entry id, job id)   groups of 2
Max ARGV: 2001  = 1 + 2 per entry: at most 1000 entries (shardq.store.delivery.MAX_ACK)

Returns the number of jobs settled.  An entry no longer pending (reclaimed and settled by
another worker, or dead-lettered as poison meanwhile) is not counted and its envelope is kept.

Flags: allow-oom  (runs when Redis is at maxmemory: it frees memory or keeps a full Redis draining)
]]
--@include checks.lua
--@include acks.lua

local wrong = wrong_type({KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash'})
if wrong then return wrong end
local settled, refused_reply = ack_entries(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], 2)
return refused_reply or settled
