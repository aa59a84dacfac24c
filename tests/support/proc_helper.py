"""A worker or dispatcher in its own process, for tests that kill it with SIGKILL.

    python tests/support/proc_helper.py worker URL QUEUE RECORD_KEY SLEEP [visibility_timeout]
    python tests/support/proc_helper.py dispatcher URL QUEUE BATCH LEASE_TIME RENEW_INTERVAL

The worker's handler records each start in the hash ``RECORD_KEY:starts`` (job id ->
"attempt:deliveries:pid" of the last start, plus a counter field per job in
``RECORD_KEY:start_count``) and appends every start and finish to the list ``RECORD_KEY:log``
(JSON: job id, event, attempt, deliveries, partition, pid, Redis ms at fetch, wall ms; read
with :func:`support.helpers.start_log`), sleeps SLEEP seconds, then records the finish in
``RECORD_KEY:finishes``.  It records on a client of its own, with room for every handler at
once: sharing the worker's asyncio cluster client, whose nodes allow ``max_connections`` (64,
the worker's default concurrency too) and fail the next call at once (redis-py's
MaxConnectionsError), made a busy worker's handlers fail and their jobs retried (run again).
Both run until killed.
``SHARDQ_TEST_SETTINGS`` (JSON) overrides settings fields; ``SHARDQ_INSTANCE`` names the
instance (a restart in place).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import replace

from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.worker import Worker


async def run_worker(url: str, queue: str, record: str, sleep: float, visibility: float) -> None:
    settings = RedisSettings.from_url(url)
    redis = await connect_async(settings)
    recorder = await connect_async(replace(settings, max_connections=1024))

    def event(job: Job, what: str) -> str:
        return json.dumps(
            {
                "id": job.id,
                "event": what,
                "attempt": job.attempt,
                "deliveries": job.deliveries,
                "partition": job.partition,
                "pid": os.getpid(),
                "fetched_ms": job.fetched_redis_ms,
                "wall_ms": int(time.time() * 1000),
            }
        )

    async def handler(job: Job) -> None:
        await recorder.rpush(f"{record}:log", event(job, "start"))
        await recorder.hset(
            f"{record}:starts", job.id, f"{job.attempt}:{job.deliveries}:{os.getpid()}"
        )
        await recorder.hincrby(f"{record}:start_count", job.id, 1)
        await asyncio.sleep(sleep)
        await recorder.hincrby(f"{record}:finishes", job.id, 1)
        await recorder.rpush(f"{record}:log", event(job, "finish"))

    fields = {
        "visibility_timeout": visibility,
        "heartbeat_interval": min(0.5, visibility / 2),
        "reclaim_interval": 0.5,
        "idle_poll": 0.2,
        "membership_timeout": 2.0,
    }
    fields.update(json.loads(os.environ.get("SHARDQ_TEST_SETTINGS") or "{}"))
    settings = WorkerSettings(**fields)
    worker = Worker(redis, queue, handlers={"t": handler}, settings=settings)
    print("worker running", flush=True)
    await worker.run()


async def run_dispatcher(url: str, queue: str, batch: int, lease: float, renew: float) -> None:
    redis = await connect_async(RedisSettings.from_url(url))
    settings = DispatcherSettings(
        batch=batch, lease_time=lease, renew_interval=renew, max_sleep=0.2, membership_timeout=lease
    )
    dispatcher = Dispatcher(redis, queue, settings=settings, owner=f"doomed:{os.getpid()}")
    print("dispatcher running", flush=True)
    await dispatcher.run()


def main(argv: list[str]) -> None:
    role, url, queue = argv[1], argv[2], argv[3]
    if role == "worker":
        visibility = float(argv[6]) if len(argv) > 6 else 30.0
        asyncio.run(run_worker(url, queue, argv[4], float(argv[5]), visibility))
    elif role == "dispatcher":
        asyncio.run(run_dispatcher(url, queue, int(argv[4]), float(argv[5]), float(argv[6])))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv)
