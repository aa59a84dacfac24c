# The commands of docs/guides/observability.md (tests/examples runs them against a cluster).
shardq queue create -q traced --partitions 16
# --8<-- [start:cli]
shardq queue stats -q traced                 # per queue, node and partition; --watch redraws
shardq queue info -q traced            # per partition: counts, oldest due, lag, owner, node
shardq queue members -q traced         # live workers and dispatchers
shardq redis check -q traced                # exit 0: Redis answers, the queue exists, no bad setting
# --8<-- [end:cli]
