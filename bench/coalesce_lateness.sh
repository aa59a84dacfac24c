#!/bin/bash
# Lateness at 5,000 and 10,000 jobs/s due (64 partitions, 1 dispatcher, 1 worker) with and
# without the promote coalescing window, alternating, 3 rounds; each line carries the
# calibration of its run.  Needs the benchmark cluster: make bench-cluster-up.
cd "$(dirname "$0")/.."
for round in 1 2 3; do
  for c in 0 0.002; do
    for rate in 5000 10000; do
      jobs=$((rate * 10))
      out=$(SHARDQ_DISPATCHER_COALESCE=$c .venv/bin/python -m bench.e2e --url redis://127.0.0.1:7300 --jobs $jobs --spread 10 --json 2>/dev/null | tail -1)
      echo "round=$round coalesce=$c rate=$rate $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); c=d["calibration"]; print("p50",d["lateness_ms"]["p50"],"p99",d["lateness_ms"]["p99"],"lost",d["lost"],"dup",d["duplicates"],"cpu_loop",c["cpu_loop_iter_per_s"],"ping",c["redis_benchmark"]["ping_per_s"],"load",c["loadavg_1m"])')"
    done
  done
done
