"""Profile one process draining a backlog (a Dispatcher and a Worker, no-op async handler).

    python -m bench.profile_drain --url redis://127.0.0.1:7310 [--jobs 100000] [--top 25]

Enqueues ``--jobs`` jobs due a second ago on a fresh queue of 16 partitions, drains them under
cProfile and prints the drain rate and the functions that took the most time.  Absolute rates
under the profiler are about half the bench's; compare two revisions in one session.  This is
how the tracing regression of 21d54d3 was found (27c7ff1).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import secrets
import time

from shardq import JobRequest
from shardq.client import Client
from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dev.demo import delete_queue, queue_counters
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.worker import Worker

PARTITIONS = 16


async def drain(url: str, client: Client, queue: str, jobs: int) -> float:
    redis = await connect_async(RedisSettings.from_url(url))
    dispatcher = Dispatcher(
        redis,
        queue,
        settings=DispatcherSettings(
            lease_time=3, renew_interval=1, membership_timeout=3, max_sleep=0.5
        ),
    )
    worker = Worker(
        redis,
        queue,
        settings=WorkerSettings(
            concurrency=1000, fetch_batch=200, visibility_timeout=5, membership_timeout=3
        ),
    )

    async def handle(job: Job) -> None:
        pass

    worker.register("job", handle)
    tasks = [asyncio.create_task(dispatcher.run()), asyncio.create_task(worker.run())]
    started = time.monotonic()
    while queue_counters(client.redis, queue, PARTITIONS).get("completed", 0) < jobs:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    dispatcher.stop()
    worker.stop()
    await asyncio.gather(*tasks)
    await redis.aclose()
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7310")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    client = Client.from_url(args.url)
    queue = "prof-" + secrets.token_hex(3)
    client.create_queue(queue, PARTITIONS)
    due = time.time() - 1
    for start in range(0, args.jobs, 5000):
        count = min(5000, args.jobs - start)
        client.enqueue_many(queue, [JobRequest("job", "x" * 20, run_at=due) for _ in range(count)])
    profile = cProfile.Profile()
    try:
        profile.enable()
        rate = asyncio.run(drain(args.url, client, queue, args.jobs))
        profile.disable()
    finally:
        delete_queue(client.redis, queue, PARTITIONS)
    print(f"drained {args.jobs:,} jobs at {rate:,.0f} jobs/s under cProfile")
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
