--[[ can-run: which of some commands the calling Redis user may run on this node, and which the
server does not have at all.

Managed services (ElastiCache, MemoryDB, Memorystore) refuse the administrative commands: some
answer "unknown command" (renamed or removed: the server has no such command), some refuse
them by ACL.  shardq asks before an operator command that needs them (slot moves: CLUSTER
SETSLOT, GETKEYSINSLOT, COUNTKEYSINSLOT, MIGRATE), so it refuses at once, before anything
changed, and `shardq redis check` lists what is unavailable.  redis.acl_check_cmd answers for the
caller without running anything; it raises for a command the server does not know.

KEYS[1] route    any     a key of the node asked, of any type: it only routes the call (never
                         touched)

ARGV[1..] one command line each, words separated by single spaces ('CLUSTER SETSLOT 0
          STABLE'): the command, its subcommand and arguments as the real call would give them
          (a key among them is checked against the user's key patterns)
Max ARGV: 32

Returns {answer, ...} one per ARGV: 1 the user may run it; 0 the ACL refuses it; -1 the server
has no such command (renamed, removed or never had it)
Flags: no-writes  (reads only)
]]

local out = {}
for i = 1, #ARGV do
  local words = {}
  for word in string.gmatch(ARGV[i], '[^ ]+') do words[#words + 1] = word end
  local done, allowed = pcall(redis.acl_check_cmd, unpack(words))
  if not done then
    out[i] = -1
  elseif allowed then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
