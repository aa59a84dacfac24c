"""What moving a big partition's slot does to lateness while jobs keep coming due.

    python bench/move_lateness.py [--url redis://127.0.0.1:7300] [--waiting 200000]
                                  [--rate 2000] [--seconds 12] [--move-at 5]

On a fresh queue of 8 partitions, partition 0 first gets ``waiting`` jobs due in an hour (the
weight MIGRATE has to carry). Then one dispatcher and one worker run in this process while a
producer enqueues ``rate`` jobs/s over all partitions, each due 0.3 s later, for ``seconds``.
``move-at`` seconds in, partition 0's slot moves to another primary with
``shardq.admin.slots`` (what ``shardq rebalance move-partition`` runs). The report gives
lateness (handler start minus due time, Redis clock) for jobs due before, around (from 0.3 s
before the move until 1 s after it) and after the move, split into the moved primary's
partitions and the rest, plus the MIGRATE time and the lost / ran-twice counts. The queue is
deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.common import calibrate, calibration_line, delete_queue, fresh_queue  # noqa: E402
from shardq import JobRequest  # noqa: E402
from shardq.admin import slots  # noqa: E402
from shardq.aio import AsyncClient  # noqa: E402
from shardq.client import Client  # noqa: E402
from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings  # noqa: E402
from shardq.connection import connect_async  # noqa: E402
from shardq.dev.demo import percentile  # noqa: E402
from shardq.dispatcher import Dispatcher  # noqa: E402
from shardq.jobs import Job  # noqa: E402
from shardq.store import keys  # noqa: E402
from shardq.worker import Worker  # noqa: E402

PARTITIONS = 8
LEAD = 0.3  # seconds between enqueue and due time


def _stats(values: list[float]) -> dict[str, Any]:
    values = sorted(values)
    return {
        "jobs": len(values),
        "p50_ms": round(percentile(values, 0.5), 1) if values else None,
        "p99_ms": round(percentile(values, 0.99), 1) if values else None,
        "max_ms": round(values[-1], 1) if values else None,
    }


async def _run(args: argparse.Namespace, queue: str, client: Client) -> dict[str, Any]:
    redis = await connect_async(RedisSettings.from_url(args.url))
    producer = await AsyncClient.from_url(args.url)
    runs: Counter[str] = Counter()
    late: dict[str, tuple[int, int, float]] = {}  # id -> (partition, due ms, lateness ms)

    async def handler(job: Job) -> None:
        runs[job.id] += 1
        if job.due_ms is not None and job.id not in late:
            late[job.id] = (
                job.partition,
                job.due_ms,
                job.redis_now_ms(time.monotonic()) - job.due_ms,
            )

    dispatcher = Dispatcher(
        redis, queue, settings=DispatcherSettings(lease_time=5.0, renew_interval=1.0)
    )
    worker = Worker(redis, queue, handlers={"t": handler}, settings=WorkerSettings(concurrency=200))
    tasks = [asyncio.create_task(dispatcher.run()), asyncio.create_task(worker.run())]
    await asyncio.sleep(1.5)  # leases taken, consumer groups made

    primaries = await asyncio.to_thread(slots.primary_addresses, client)
    source = (await asyncio.to_thread(slots.prepare_move, client, queue, 0, primaries[0])).source
    target = next(p for p in primaries if p != source)
    on_source = [
        p
        for p in range(PARTITIONS)
        if client.redis.nodes_manager.get_node_from_slot(  # type: ignore[union-attr]
            keys.slot_of(keys.partition_keys(queue, p, PARTITIONS).due)
        ).name
        == source
    ]

    move: dict[str, Any] = {}

    async def do_move() -> None:
        await asyncio.sleep(args.move_at)
        plan = await asyncio.to_thread(slots.prepare_move, client, queue, 0, target)
        move["start_ms"] = time.time() * 1000
        result = await asyncio.to_thread(slots.move, client, plan)
        move["end_ms"] = time.time() * 1000
        move["migrate_ms"] = round(result.migrate_seconds * 1000, 1)
        move["keys"] = result.keys_moved
        move["waiting_jobs"] = plan.waiting_jobs

    ids: list[str] = []
    mover = asyncio.create_task(do_move())
    started = time.monotonic()
    batch = max(1, args.rate // 50)  # 50 batches a second
    while time.monotonic() - started < args.seconds:
        requests = [JobRequest("t", None, delay=LEAD) for _ in range(batch)]
        ids.extend(r.job_id for r in await producer.enqueue_many(queue, requests))
        await asyncio.sleep(max(0.0, len(ids) / args.rate - (time.monotonic() - started)))
    await mover
    deadline = time.monotonic() + 30
    while len(late) < len(ids) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    dispatcher.stop()
    worker.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    await producer.close()
    await redis.aclose()

    window = (move["start_ms"] - 300, move["end_ms"] + 1000)
    groups: dict[str, list[float]] = {}
    for partition, due, lateness in late.values():
        when = "before" if due < window[0] else "after" if due > window[1] else "around"
        where = "moved primary" if partition in on_source else "other primaries"
        groups.setdefault(f"{when} the move, {where}", []).append(lateness)
    # Lateness per second of due time, relative to the end of the move.
    timeline: dict[int, list[float]] = {}
    for _, due, lateness in late.values():
        timeline.setdefault(int((due - move["end_ms"]) // 1000), []).append(lateness)
    return {
        "timeline_s_after_move_p99_ms": {
            k: round(percentile(sorted(v), 0.99), 1) for k, v in sorted(timeline.items())
        },
        "waiting_jobs_in_partition_0": move["waiting_jobs"],
        "keys_moved": move["keys"],
        "migrate_ms": move["migrate_ms"],
        "from": source,
        "to": target,
        "partitions_on_moved_primary": on_source,
        "rate": args.rate,
        "jobs": len(ids),
        "lost": len(set(ids) - set(runs)),
        "ran_twice": sum(1 for n in runs.values() if n > 1),
        "lateness": {name: _stats(v) for name, v in sorted(groups.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--waiting", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--move-at", type=float, default=5.0)
    args = parser.parse_args()
    cal = calibrate(args.url)
    print(f"calibration: {calibration_line(cal)}")
    client = Client.from_url(args.url)
    queue = fresh_queue(client, "bench-move", PARTITIONS)
    try:
        in_0 = []
        n = 0
        while len(in_0) < args.waiting:  # job ids that route to partition 0
            job_id = f"w{n}-{random.getrandbits(32):x}"
            if keys.partition_for(job_id, PARTITIONS) == 0:
                in_0.append(job_id)
            n += 1
        for start in range(0, len(in_0), 10_000):
            chunk = in_0[start : start + 10_000]
            client.enqueue_many(queue, [JobRequest("w", None, delay=3600, job_id=j) for j in chunk])
        report = asyncio.run(_run(args, queue, client))
    finally:
        delete_queue(client.redis, queue, PARTITIONS)
        client.close()
    print(json.dumps({"calibration": cal, **report}, indent=2))


if __name__ == "__main__":
    main()
