# The commands of docs/guides/periodic.md (tests/examples runs them against a cluster).
shardq queue create -q digests --partitions 16
# --8<-- [start:cli]
shardq schedule add -q digests daily-digest send_digest --cron "0 7 * * 1-5" \
  --tz Europe/Berlin --payload '{"kind": "daily"}' --max-attempts 3
shardq schedule add -q digests heartbeat ping --every 30s --misfire skip
shardq schedule list -q digests
shardq schedule next -q digests daily-digest -n 3
shardq schedule show -q digests daily-digest
shardq schedule pause -q digests daily-digest
shardq schedule resume -q digests daily-digest
shardq schedule remove -q digests heartbeat --yes
# --8<-- [end:cli]
