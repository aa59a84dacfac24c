"""Handlers of the workers of bench/failover.py and bench/pause.py: record each start, and
optionally hold the job.

Each start appends ``<job id> <attempt> <start epoch s> <lateness ms> <pid>`` to the run log
``SHARDQ_BENCH_RUNLOG`` with one O_APPEND write, so a SIGKILLed worker keeps every line.
Lateness is on the Redis clock (handler start minus due time, as the worker measures it).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from shardq import Job

_fd = os.open(os.environ["SHARDQ_BENCH_RUNLOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
_hold = float(os.environ.get("SHARDQ_BENCH_HOLD", "0"))
_pid = os.getpid()


def _record(job: Job) -> None:
    late = job.redis_now_ms(time.monotonic()) - (job.due_ms or 0)
    line = f"{job.id} {job.attempt} {time.time():.4f} {max(0.0, late):.2f} {_pid}\n"
    os.write(_fd, line.encode())


async def hold(job: Job) -> None:
    _record(job)
    await asyncio.sleep(_hold)


def tick(job: Job) -> None:
    _record(job)


def register(worker: Any) -> None:
    worker.register("hold", hold)
    worker.register("tick", tick, inline=True)
