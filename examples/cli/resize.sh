# The read-only commands of docs/guides/resize.md (tests/examples runs them against a cluster).
shardq queue create -q orders --partitions 16
# --8<-- [start:look]
shardq queue info -q orders                   # per partition: counts, lag, owner, node
shardq queue owners -q orders                       # lease owner, token and age per partition
shardq rebalance leases -q orders             # the partitions' spread over dispatchers
shardq rebalance nodes -q orders              # load per Redis primary, and the best move
shardq rebalance plan -q orders               # the moves that even out every primary
# --8<-- [end:look]
