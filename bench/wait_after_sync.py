"""How long the first WAIT takes right after a replica's full sync, next to a later WAIT.

    python bench/wait_after_sync.py [--port 7320] [--rounds 5]

Starts two standalone nodes of our own (``port`` and ``port + 1``), makes the second a
replica of the first, waits until both sides report the link up and online, then times one
write + ``WAIT 1`` (the first after the sync) and a second one. Repeats with a fresh resync
(``REPLICAOF NO ONE`` then again) each round. Stops both nodes at the end. This is why
``shardq dev cluster up`` makes a probe write on each primary before it says the cluster is
ready, and why ``durable_timeout`` should stay at 1 s or more.
"""

from __future__ import annotations

import argparse
import statistics
import time

import redis

from bench.calibration import calibrate, calibration_line
from shardq.dev import devcluster


def _synced(primary: redis.Redis, replica: redis.Redis) -> bool:
    link = replica.info("replication").get("master_link_status") == "up"
    states = [
        v.get("state")
        for k, v in primary.info("replication").items()
        if k.startswith("slave") and isinstance(v, dict)
    ]
    return link and states == ["online"]


def _timed_write_wait(primary: redis.Redis, n: int) -> float:
    start = time.perf_counter()
    primary.set(f"wait-probe:{n}", "1")
    acked = int(primary.execute_command("WAIT", 1, 5000))
    elapsed = time.perf_counter() - start
    if acked < 1:
        raise SystemExit("the replica did not acknowledge within 5 s")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=7320)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    devcluster.standalone_up(args.port)
    devcluster.standalone_up(args.port + 1)
    print(f"calibration: {calibration_line(calibrate(f'redis://127.0.0.1:{args.port}'))}")
    primary = redis.Redis(port=args.port)
    replica = redis.Redis(port=args.port + 1)
    first: list[float] = []
    later: list[float] = []
    try:
        for n in range(args.rounds):
            replica.execute_command("REPLICAOF", "NO", "ONE")
            replica.flushall()  # a different dataset: the next REPLICAOF does a full sync
            replica.execute_command("REPLICAOF", "127.0.0.1", args.port)
            deadline = time.monotonic() + 30
            while not _synced(primary, replica):
                if time.monotonic() > deadline:
                    raise SystemExit("replica did not sync within 30 s")
                time.sleep(0.01)
            first.append(_timed_write_wait(primary, 2 * n))
            later.append(_timed_write_wait(primary, 2 * n + 1))
    finally:
        replica.execute_command("REPLICAOF", "NO", "ONE")
        devcluster.standalone_down(args.port + 1)
        devcluster.standalone_down(args.port)
    slow = sum(1 for t in first if t > 0.1)
    print(f"rounds: {args.rounds}")
    print(
        f"first write+WAIT after a full sync: {slow} of {args.rounds} took over 100 ms; "
        f"median {statistics.median(first) * 1000:.1f} ms, max {max(first) * 1000:.0f} ms"
    )
    print(
        f"next write+WAIT:                    median {statistics.median(later) * 1000:.1f} ms, "
        f"max {max(later) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
