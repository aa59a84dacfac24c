"""How the placement autopilot (`shardq balancer run`) converges, under load, counting every job.

    python -m bench.balancer_converge [--case pile|add] [--partitions 48] [--waiting 200000]
                                      [--rate 1000] [--concurrency 2] [--rounds 1]

On a cluster of its own (ports 7321-7326, and 7327 for the added primary; started fresh,
stopped at the end): a queue of ``partitions`` holding ``waiting`` jobs due in an hour (spread
evenly: the bytes), and ``rate`` jobs/s due 0.3 s after enqueue, run by one dispatcher and one
worker in this process (the rate).

- ``pile``: every slot of the queue first moved to one primary (busiest/mean 3.0);
- ``add``: the queue spread evenly over 3 primaries, then a fourth (empty) primary joins.

Then a balancer (``--by load``, tolerance 10 %, trigger 20 %, sustain 1, interval 1 s, window
0.5 s, ``--concurrency`` moves at once) runs until every primary is within the tolerance. The
report: busiest/mean and least/mean before and after (by load and by bytes), moves, bytes moved,
seconds to converge, the longest MIGRATE, lateness p50/p99/max of the live jobs due while it
ran, and lost / ran twice; with the calibration of the run (redis-benchmark PING).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

from bench.common import calibrate, calibration_line
from shardq import JobRequest
from shardq.admin import balancer, slots
from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dev.demo import percentile
from shardq.dev.devcluster import add_primary, cluster_down, cluster_up
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.store import keys
from shardq.worker import Worker

BASE_PORT = 7321
ADDED_PORT = 7327
LEAD = 0.3


def _ratios(m: balancer.Measurement, by: balancer.By) -> dict[str, float]:
    loads = m.loads(by)
    mean = sum(loads.values()) / len(loads)
    return {
        "busiest_over_mean": round(max(loads.values()) / mean, 3) if mean else 1.0,
        "least_over_mean": round(min(loads.values()) / mean, 3) if mean else 1.0,
    }


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
    await asyncio.sleep(2.0)  # a rate to measure
    if args.case == "add":
        await asyncio.to_thread(add_primary, BASE_PORT, ADDED_PORT)
    settings = balancer.BalancerSettings(
        queues=(queue,),
        by="load",
        tolerance=0.10,
        trigger=0.20,
        sustain=1,
        interval=1.0,
        window=0.5,
        lease_ms=10_000,
        budget=balancer.Budget(concurrency=args.concurrency, max_moves=1000),
    )
    before = await asyncio.to_thread(balancer.measure, client, (queue,), 1.0)
    b = balancer.Balancer(lambda: Client.from_url(url), settings)
    quit_balancer = threading.Event()
    started_ms = time.time() * 1000
    t0 = time.monotonic()
    converged_s: float | None = None
    runner = asyncio.create_task(asyncio.to_thread(b.run, quit_balancer))
    try:
        while time.monotonic() - t0 < args.timeout:
            await asyncio.sleep(1.0)
            try:
                now = await asyncio.to_thread(balancer.measure, client, (queue,), 0.5)
            except slots.SlotMidMoveError:
                continue  # the balancer is moving that slot right now
            if now.deviation("load") <= settings.tolerance:
                converged_s = time.monotonic() - t0
                break
    finally:
        quit_balancer.set()
        await runner
    ended_ms = time.time() * 1000
    after = await asyncio.to_thread(balancer.measure, client, (queue,), 1.0)
    b.close()
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

    done = [m for r in b.rounds if r.outcome for m in r.outcome.done]
    during = sorted(lat for due, lat in late.values() if started_ms <= due <= ended_ms)
    waiting = sum(
        client.redis.zcard(pk.due)  # type: ignore[misc]
        for pk in keys.all_partition_keys(queue, args.partitions)
    )
    return {
        "case": args.case,
        "partitions": args.partitions,
        "primaries_after": len(after.primaries),
        "waiting_jobs": args.waiting,
        "rate": args.rate,
        "concurrency": args.concurrency,
        "before": {"load": _ratios(before, "load"), "bytes": _ratios(before, "bytes")},
        "after": {"load": _ratios(after, "load"), "bytes": _ratios(after, "bytes")},
        "converged_s": None if converged_s is None else round(converged_s, 1),
        "moves": len(done),
        "bytes_moved": sum(m.move.bytes for m in done),
        "longest_migrate_ms": round(max((m.migrate_seconds for m in done), default=0) * 1000, 1),
        "live_jobs": len(ids),
        "lateness_during_ms": {
            "jobs": len(during),
            "p50": round(percentile(during, 0.5), 1) if during else None,
            "p99": round(percentile(during, 0.99), 1) if during else None,
            "max": round(during[-1], 1) if during else None,
        },
        "lost": len(set(ids) - set(runs)),
        "ran_twice": sum(1 for n in runs.values() if n > 1),
        "waiting_jobs_kept": waiting,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("pile", "add"), default="pile")
    parser.add_argument("--partitions", type=int, default=48)
    parser.add_argument("--waiting", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    for _ in range(args.rounds):
        cluster_down(BASE_PORT)
        url = cluster_up(BASE_PORT)
        try:
            cal = calibrate(url)
            client = Client.from_url(url)
            queue = "bench-balancer"
            client.create_queue(queue, args.partitions)
            if args.case == "pile":
                on = slots.primary_addresses(client)[0]
                for p in range(args.partitions):
                    plan = slots.prepare_move(client, queue, p, on)
                    if plan.needed:
                        slots.move(client, plan)
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
