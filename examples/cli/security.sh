# The commands of docs/guides/security.md (tests/examples runs them against a cluster).
# --8<-- [start:acl]
shardq acl print                                       # every role's user, as an ACL file
shardq acl print --role producer -q emails -q reports  # one role, confined to two queues
# --8<-- [end:acl]
