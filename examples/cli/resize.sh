# The read-only commands of docs/guides/resize.md (tests/examples runs them against a cluster).
shardq queue create -q orders --partitions 16
# --8<-- [start:look]
shardq queue info -q orders                   # per partition: counts, lag, owner, node
shardq owners -q orders                       # lease owner, token and age per partition
shardq rebalance -q orders                    # the partitions' spread over dispatchers
shardq rebalance -q orders --nodes            # load per Redis primary, and the best move
shardq rebalance -q orders --nodes --plan     # the moves that even out every primary
# --8<-- [end:look]
