"""What sticky routing costs the producer: CPU per job to prepare a bulk enqueue (ids, routing,
bodies: everything but the Redis call), sticky runs against one-by-one routing, alternating in
one run, with a CPU-loop calibration before and after.

    python -m bench.sticky_producer [--jobs 20000] [--rounds 5] [--partitions 64]

Both settings prepare the same requests (20-byte payloads, due 0.5 ms apart over the next
minutes, compact timed ids as a layout-3 queue gives them) through
``shardq.store.producer.prepare_many``, which ``Client.enqueue_many`` calls; ``steer`` alone is
the id steering a sticky job pays on top of drawing a random id.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.calibration import cpu_loop_rate
from shardq import JobRequest
from shardq.config import ProducerSettings
from shardq.jobs import new_timed_job_id, timed_head
from shardq.store import producer, sticky


def per_job_us(fn: Any, n: int) -> float:
    t0 = time.process_time()
    fn()
    return (time.process_time() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--partitions", type=int, default=64)
    args = parser.parse_args(argv)
    n, parts = args.jobs, args.partitions
    print(f"calibration (before): python CPU loop {cpu_loop_rate() / 1e6:.1f} M iter/s")
    now = time.time()
    reqs = [JobRequest("job", "x" * 20, run_at=now + 60 + i / 2000) for i in range(n)]
    settings = {"sticky 16": ProducerSettings(), "one by one": ProducerSettings(sticky_jobs=1)}
    rows: dict[str, list[float]] = {k: [] for k in settings}
    rows["steer (one id)"] = []
    rows["random timed id (one)"] = []
    head = timed_head(int(now * 1000) + 60_000)
    for rnd in range(args.rounds):
        order = list(settings.items())
        for name, s in order if rnd % 2 == 0 else order[::-1]:
            sticky.RUNS.clear()
            rows[name].append(
                per_job_us(lambda s=s: producer.prepare_many("q", parts, reqs, s, True), n)
            )
        rows["steer (one id)"].append(
            per_job_us(lambda: [sticky.steer(head, 7 % parts, parts) for _ in range(n)], n)
        )
        rows["random timed id (one)"].append(
            per_job_us(lambda: [new_timed_job_id(now * 1000 + 60_000) for _ in range(n)], n)
        )
    print(f"calibration (after): python CPU loop {cpu_loop_rate() / 1e6:.1f} M iter/s")
    print(f"| {n:,} jobs, {parts} partitions | producer CPU µs/job, min-max of {args.rounds} |")
    print("|---|---|")
    # What runs add, paired within each round (both measured back to back).
    rows["runs minus one by one (paired)"] = [
        a - b for a, b in zip(rows["sticky 16"], rows["one by one"], strict=True)
    ]
    for name, values in rows.items():
        print(f"| {name} | {min(values):.2f}-{max(values):.2f} |")
    print(json.dumps({k: [round(v, 3) for v in vs] for k, vs in rows.items()}))


if __name__ == "__main__":
    main()
