"""A rate limit kept by several worker processes: achieved rate against the limit, and what the
gate costs per job.

    python -m bench.ratelimit --url redis://127.0.0.1:7300 [--rate 500] [--seconds 60]
                              [--workers 3] [--rounds 3] [--json]

Per round, on a fresh queue of 16 partitions with one ``shardq dispatcher run`` and
``--workers`` ``shardq worker run`` processes (no-op handlers):

- **accuracy**: a backlog of jobs due now, of a type limited to ``--rate``/s, bigger than the
  limit can drain in ``--seconds`` + 15 s.  After 10 s (the first second's burst and the
  start-up are left out), completed jobs are counted over ``--seconds``: achieved rate and its
  ratio to the limit.  Then the rest drains, for the deferrals per job over the whole backlog
  (a job is deferred at most once: it comes back with its start reserved).
- **cost**: the same drain of ``--drain-jobs`` jobs three ways, back to back: no limit, a limit
  that never binds (1,000,000/s: every job goes through the gate, none waits), and none again;
  the drain rates side by side give the gate's cost.

Each round prints the calibration of the machine measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import Fleet, calibrate, calibration_line, fresh_queue
from shardq import JobRequest, limits
from shardq.client import Client
from shardq.dev.demo import delete_queue, queue_counters

PARTITIONS = 16
LIMITED = "bench"


def _enqueue(client: Client, queue: str, n: int) -> None:
    for start in range(0, n, 20_000):
        client.enqueue_many(
            queue, [JobRequest(LIMITED, None) for _ in range(min(20_000, n - start))]
        )


def _fleet(url: str, queue: str, workers: int) -> Fleet:
    fleet = Fleet(url, queue)
    fleet.dispatcher()
    for i in range(workers):
        fleet.worker(f"worker-{i}", concurrency=200)
    return fleet


def accuracy(client: Client, url: str, rate: int, seconds: float, workers: int) -> dict[str, Any]:
    queue = fresh_queue(client, "rl", PARTITIONS)
    client.set_limit(queue, limits.for_type(LIMITED, rate))
    total = int(rate * (seconds + 25))
    _enqueue(client, queue, total)
    fleet = _fleet(url, queue, workers)
    try:
        time.sleep(10)
        before = queue_counters(client.redis, queue, PARTITIONS)
        t0 = time.monotonic()
        time.sleep(seconds)
        after = queue_counters(client.redis, queue, PARTITIONS)
        elapsed = time.monotonic() - t0
        # The rest of the backlog, to count every job's deferrals (each at most one).
        while queue_counters(client.redis, queue, PARTITIONS).get("completed", 0) < total:
            time.sleep(0.5)
        whole = queue_counters(client.redis, queue, PARTITIONS)
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, PARTITIONS)
    done = after.get("completed", 0) - before.get("completed", 0)
    achieved = done / elapsed
    return {
        "limit_per_s": rate,
        "achieved_per_s": round(achieved, 1),
        "ratio": round(achieved / rate, 4),
        "window_s": round(elapsed, 1),
        "deferrals_per_job": round(whole.get("deferred", 0) / total, 3),
        "extra_completions": whole.get("completed", 0) - total,
    }


def drain(client: Client, url: str, n: int, workers: int, limit: int | None) -> float:
    queue = fresh_queue(client, "rl-cost", PARTITIONS)
    if limit is not None:
        client.set_limit(queue, limits.for_type(LIMITED, limit))
    _enqueue(client, queue, n)
    fleet = _fleet(url, queue, workers)
    try:
        t0 = time.monotonic()
        while queue_counters(client.redis, queue, PARTITIONS).get("completed", 0) < n:
            if time.monotonic() - t0 > 300:
                raise RuntimeError("drain did not finish in 300 s")
            time.sleep(0.05)
        return n / (time.monotonic() - t0)
    finally:
        fleet.stop()
        delete_queue(client.redis, queue, PARTITIONS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--drain-jobs", type=int, default=60_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    client = Client.from_url(args.url)
    for r in range(1, args.rounds + 1):
        cal = calibrate(args.url)
        acc = accuracy(client, args.url, args.rate, args.seconds, args.workers)
        free = drain(client, args.url, args.drain_jobs, args.workers, None)
        gated = drain(client, args.url, args.drain_jobs, args.workers, 1_000_000)
        free2 = drain(client, args.url, args.drain_jobs, args.workers, None)
        row = {
            "round": r,
            **acc,
            "drain_no_limit_per_s": round(free),
            "drain_gated_per_s": round(gated),
            "drain_no_limit_again_per_s": round(free2),
            "gated_over_unlimited": round(gated / ((free + free2) / 2), 3),
            "calibration": cal,
        }
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"round {r}: limit {args.rate}/s, achieved {acc['achieved_per_s']}/s "
                f"(ratio {acc['ratio']}) over {acc['window_s']} s with {args.workers} workers, "
                f"{acc['deferrals_per_job']} deferrals/job; drain {free:,.0f} / gated "
                f"{gated:,.0f} / {free2:,.0f} jobs/s (gated/unlimited "
                f"{row['gated_over_unlimited']}); {calibration_line(cal)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
