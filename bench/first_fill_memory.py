"""Where the memory of the first fill of a fresh cluster goes, next to a second fill.

    python bench/first_fill_memory.py [--base-port 7330] [--jobs 100000]

Starts a fresh 6-node cluster of its own (``base_port .. base_port + 5``), enqueues ``jobs``
delayed jobs (20-byte payload, due in an hour) into one new queue, then the same into a second
queue, and prints per job for each fill the change of INFO memory fields summed over the
primaries. The replication backlog (``mem_replication_backlog``) grows only in the first fill,
up to ``repl-backlog-size`` per primary: a fixed cost, which is why shardq's benchmarks leave it
out of bytes per job. Stops the cluster at the end.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.calibration import calibrate, calibration_line
from shardq import JobRequest
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.connection import connect
from shardq.dev import devcluster

FIELDS = (
    "used_memory",
    "mem_replication_backlog",
    "used_memory_dataset",
    "used_memory_overhead",
    "mem_clients_normal",
    "mem_clients_slaves",
)


def _primaries_memory(client: Client) -> dict[str, int]:
    info: Any = client.redis.info("memory", target_nodes="primaries")  # type: ignore[call-arg]
    return {f: sum(int(node.get(f, 0)) for node in info.values()) for f in FIELDS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-port", type=int, default=7330)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    devcluster.cluster_down(args.base_port)  # fresh means fresh: no earlier writes
    url = devcluster.cluster_up(args.base_port)
    try:
        conn = connect(RedisSettings.from_url(url))
        conn.flushall()
        conn.close()
        print(f"calibration: {calibration_line(calibrate(url))}")
        with Client.from_url(url) as client:
            print(f"{'bytes per job':<26}" + "".join(f"{f:>26}" for f in FIELDS))
            for fill in ("first fill", "second fill"):
                queue = f"fill-{fill.split()[0]}"
                client.create_queue(queue, 64)
                before = _primaries_memory(client)
                requests = [JobRequest("t", "x" * 18, delay=3600) for _ in range(args.jobs)]
                client.enqueue_many(queue, requests)  # "x"*18 encodes to a 20-byte JSON string
                after = _primaries_memory(client)
                row = "".join(f"{(after[f] - before[f]) / args.jobs:>26.1f}" for f in FIELDS)
                print(f"{fill:<26}{row}")
    finally:
        devcluster.cluster_down(args.base_port)


if __name__ == "__main__":
    main()
