# The commands of docs/guides/retries.md (tests/examples runs them against a cluster).
shardq queue create -q accounts --partitions 16
# --8<-- [start:enqueue]
shardq job enqueue -q accounts sync --payload '{"account": 7}' --max-attempts 8 \
  --backoff exponential --backoff-base 2s --backoff-cap 10m
# --8<-- [end:enqueue]
# --8<-- [start:dead]
shardq job list -q accounts --state retrying      # failed, waiting for their next attempt
shardq dlq list -q accounts                       # dead letters: id, type, reason
shardq dlq replay -q accounts --all --yes         # run them again, attempts reset, due now
shardq dlq purge -q accounts --all --yes          # or drop them
# --8<-- [end:dead]
