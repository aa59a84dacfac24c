"""Resizing a live queue (`shardq queue resize`) under load, counting every job.

    python -m bench.resize [--from 16] [--to 32] [--waiting 200000] [--rate 1000]
                           [--batch 200] [--rounds 1]

On a cluster of its own (ports 7331-7336; started fresh, stopped at the end): a queue of
``--from`` partitions holding ``--waiting`` jobs due in an hour, and ``--rate`` jobs/s due
0.3 s after enqueue, run by one dispatcher and one worker in this process.  Then the queue is
resized to ``--to`` partitions by a :class:`shardq.admin.resize.Resizer` in a thread while the
producer and the fleet go on.  The report: seconds to finish, Redis CPU spent on the primaries
during it (net of their idle rate) and its script calls, the slowest round of the driver's
calls (one round: a take and the puts of up to 64 partitions, pipelined), lateness p50/p99/max
of the live jobs due while it ran (and by phase: preparing, moving, retiring), lost / ran
twice, and the waiting jobs found in the new partitions; with the calibration of the run
(redis-benchmark PING).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time
from collections import Counter
from typing import Any

from bench.common import Sampler, calibrate, calibration_line
from shardq import JobRequest
from shardq.admin.resize import Progress, Resizer
from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dev.demo import percentile
from shardq.dev.devcluster import cluster_down, cluster_up
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.worker import Worker

BASE_PORT = 7331
LEAD = 0.3


async def _run(args: argparse.Namespace, url: str, queue: str, client: Client) -> dict[str, Any]:
    redis = await connect_async(RedisSettings.from_url(url))
    producer = await AsyncClient.from_url(url)
    runs: Counter[str] = Counter()
    late: dict[str, tuple[int, float]] = {}  # id -> (due ms, lateness ms)

    async def handler(job: Job) -> None:
        runs[job.id] += 1
        if job.due_ms is not None and job.id not in late:
            late[job.id] = (job.due_ms, job.redis_now_ms(time.monotonic()) - job.due_ms)

    dispatcher = Dispatcher(
        redis, queue, settings=DispatcherSettings(lease_time=5.0, renew_interval=1.0)
    )
    worker = Worker(redis, queue, handlers={"t": handler}, settings=WorkerSettings(concurrency=200))
    tasks = [asyncio.create_task(dispatcher.run()), asyncio.create_task(worker.run())]
    await asyncio.sleep(1.5)
    ids: list[str] = []
    stop_producing = asyncio.Event()

    async def produce() -> None:
        started = time.monotonic()
        batch = max(1, args.rate // 50)
        while not stop_producing.is_set():
            requests = [JobRequest("t", None, delay=LEAD) for _ in range(batch)]
            ids.extend(r.job_id for r in await producer.enqueue_many(queue, requests))
            await asyncio.sleep(max(0.0, len(ids) / args.rate - (time.monotonic() - started)))

    making = asyncio.create_task(produce())
    await asyncio.sleep(2.0)
    sampler = Sampler(client)
    await asyncio.to_thread(sampler.calibrate, 1.0)
    last: list[Progress] = []
    admin = Client.from_url(url)
    resizer = Resizer(admin, queue, batch=args.batch, on_progress=last.append)
    started_ms = time.time() * 1000
    t0 = time.monotonic()
    final = await asyncio.to_thread(resizer.run, args.to)
    seconds = time.monotonic() - t0
    ended_ms = time.time() * 1000
    spent = sampler.delta()
    admin.close()
    await asyncio.sleep(2.0)
    stop_producing.set()
    await making
    deadline = time.monotonic() + 30
    while len(late) < len(ids) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    dispatcher.stop()
    worker.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    await producer.close()
    await redis.aclose()
    during = sorted(lat for due, lat in late.values() if started_ms <= due <= ended_ms)
    # The phases: preparing (the fleet takes up the new partitions), moving (producers route
    # to them, waiting jobs are moved), retiring (committed: the fleet drops the old ones).
    marks = [
        ("preparing", started_ms),
        ("moving", float(final.raw.get("moving_ms", started_ms))),
        ("retiring", float(final.raw.get("committed_ms", ended_ms))),
        ("", ended_ms),
    ]
    by_phase: dict[str, dict[str, Any]] = {}
    for (name, lo), (_, hi) in itertools.pairwise(marks):
        part = sorted(lat for due, lat in late.values() if lo <= due < hi)
        by_phase[name] = {
            "seconds": round((hi - lo) / 1000, 1),
            "jobs": len(part),
            "p50": round(percentile(part, 0.5), 1) if part else None,
            "p99": round(percentile(part, 0.99), 1) if part else None,
        }
    layout = client.layout(queue)
    kept = sum(client.redis.zcard(pk.due) for pk in layout.active())  # type: ignore[misc]
    p = last[-1] if last else None
    return {
        "from": args.source,
        "to": args.to,
        "phase": final.phase,
        "waiting_jobs": args.waiting,
        "rate": args.rate,
        "batch": args.batch,
        "seconds": round(seconds, 1),
        "moved": int(final.raw.get("moved", 0)),
        "redis_cpu_s": round(spent["cpu_usec"] / 1e6, 2),
        "script_calls": spent["script_calls"],
        "script_ms_per_call": round(spent["script_usec"] / max(1, spent["script_calls"]) / 1000, 3),
        "slowest_round_ms": round(p.longest_ms, 1) if p else None,
        "live_jobs": len(ids),
        "lateness_during_ms": {
            "jobs": len(during),
            "p50": round(percentile(during, 0.5), 1) if during else None,
            "p99": round(percentile(during, 0.99), 1) if during else None,
            "max": round(during[-1], 1) if during else None,
        },
        "lateness_by_phase_ms": by_phase,
        "lost": len(set(ids) - set(runs)),
        "ran_twice": sum(1 for n in runs.values() if n > 1),
        "waiting_jobs_kept": kept,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=int, default=16)
    parser.add_argument("--to", type=int, default=32)
    parser.add_argument("--waiting", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.rounds):
        cluster_down(BASE_PORT)
        url = cluster_up(BASE_PORT)
        try:
            cal = calibrate(url)
            client = Client.from_url(url)
            queue = "bench-resize"
            client.create_queue(queue, args.source)
            for start in range(0, args.waiting, 10_000):
                n = min(10_000, args.waiting - start)
                client.enqueue_many(queue, [JobRequest("w", None, delay=3600) for _ in range(n)])
            report = asyncio.run(_run(args, url, queue, client))
            client.close()
            print(f"calibration: {calibration_line(cal)}")
            print(json.dumps(report, indent=2))
        finally:
            cluster_down(BASE_PORT)


if __name__ == "__main__":
    main()
