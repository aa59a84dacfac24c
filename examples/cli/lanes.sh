# The commands of docs/guides/lanes.md (tests/examples runs them against a cluster).
# --8<-- [start:cli]
shardq queue create -q renders --partitions 16 --lanes
shardq queue lanes -q renders                 # show; --on / --off to set
shardq job enqueue -q renders render --payload '{"id": 7}' --priority high --tenant acme
shardq job enqueue -q renders render --payload '{"id": 8}' --tenant acme --in 10m --job-id render-8
shardq job reschedule -q renders render-8 --priority low
shardq limit set -q renders --tenant '*' --concurrency 10
# --8<-- [end:cli]
