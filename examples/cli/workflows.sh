# The commands of docs/guides/workflows.md (tests/examples runs them against a cluster).
shardq queue create -q imports --partitions 16
# --8<-- [start:cli]
shardq batch list -q imports                  # the newest batches and chains; --json
# --8<-- [end:cli]
