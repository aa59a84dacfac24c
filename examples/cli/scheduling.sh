# The commands of docs/guides/scheduling.md (tests/examples runs them against a cluster).
# --8<-- [start:cli]
shardq queue create -q emails --partitions 16
shardq job enqueue -q emails send --payload '{"to": "a@example.com"}' --in 5m --job-id welcome-a
shardq job get -q emails welcome-a
shardq job reschedule -q emails welcome-a --in 1h
shardq job list -q emails --state scheduled --limit 10
shardq job cancel -q emails welcome-a
# --8<-- [end:cli]
