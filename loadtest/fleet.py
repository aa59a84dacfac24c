"""A shardq dispatcher or worker for the load test, run as a subprocess of locust.

    python loadtest/fleet.py --role worker --url redis://127.0.0.1:7300 --queue lt-...
    python loadtest/fleet.py --role dispatcher --url redis://127.0.0.1:7300 --queue lt-...

The worker's handler records, for every job it starts, the job type, id and lateness (handler
start minus due time, both on the Redis primary's clock: ``job.redis_now_ms(monotonic) -
job.due_ms``) and writes them to stdout as JSON lines every ``--flush`` seconds::

    {"r": [["steady", "<job id>", 3.2], ...]}

The locust process reads the lines and fires one ``lateness`` request event per job.  On
SIGTERM both roles stop cleanly (the dispatcher hands back its leases, the worker finishes
in-flight jobs) and print a last line ``{"rss_mb": <peak resident set size>}``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from shardq.config import DispatcherSettings, RedisSettings, WorkerSettings
from shardq.connection import connect_async
from shardq.dispatcher import Dispatcher
from shardq.jobs import Job
from shardq.worker import Worker

JOB_TYPES = ("steady", "burst", "backlog", "job")


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(record) + b"\n")
    sys.stdout.buffer.flush()


async def run(args: argparse.Namespace) -> None:
    settings = RedisSettings.from_env()
    settings = RedisSettings.from_url(
        args.url, username=settings.username, password=settings.password
    )
    redis = await connect_async(settings)
    runner: Dispatcher | Worker
    buffer: list[tuple[str, str, float]] = []
    if args.role == "dispatcher":
        runner = Dispatcher(
            redis,
            args.queue,
            settings=DispatcherSettings(lease_time=4.0, renew_interval=1.0, batch=args.batch),
        )
    else:
        runner = Worker(
            redis,
            args.queue,
            settings=WorkerSettings(
                concurrency=args.concurrency, fetch_batch=200, shutdown_grace=5.0
            ),
        )

        async def handle(job: Job) -> None:
            started = time.monotonic()
            late = 0.0 if job.due_ms is None else job.redis_now_ms(started) - job.due_ms
            buffer.append((job.type, job.id, round(max(0.0, late), 3)))

        for job_type in JOB_TYPES:
            runner.register(job_type, handle)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runner.stop)

    async def flusher() -> None:
        while True:
            await asyncio.sleep(args.flush)
            if buffer:
                batch = buffer[:]
                del buffer[: len(batch)]
                _emit({"r": batch})

    flush_task = asyncio.create_task(flusher())
    try:
        await runner.run()
    finally:
        flush_task.cancel()
        if buffer:
            _emit({"r": buffer})
        _emit({"rss_mb": round(peak_rss_mb(), 1), "role": args.role})
        await redis.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="loadtest/fleet.py")
    parser.add_argument("--role", choices=("dispatcher", "worker"), required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--concurrency", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100, help="dispatcher: K jobs per promote")
    parser.add_argument("--flush", type=float, default=0.2, help="seconds between report lines")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
