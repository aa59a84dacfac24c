# The commands of docs/guides/limits.md (tests/examples runs them against a cluster).
shardq queue create -q newsletters --partitions 16
# --8<-- [start:cli]
shardq limit set -q newsletters --type send --rate 100/s          # 10/min, 5/2s, 1000/h; --burst N
shardq limit set -q newsletters --key api.partner.com --rate 10/s --concurrency 5
shardq limit set -q newsletters --tenant '*' --concurrency 10
shardq limit list -q newsletters                                   # --json
shardq job enqueue -q newsletters send --payload '{"to": "a@example.com"}' --limit-key api.partner.com
shardq limit remove -q newsletters --type send
# --8<-- [end:cli]
