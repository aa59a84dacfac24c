"""Handlers of the workers of bench/workflows.py: the no-op ``bench`` job (plain jobs and batch
children alike), and for its lateness phase a child that records when it returned and a
callback that records when it started, both on the Redis clock.

Each record appends ``<C|F> <job id> <batch id> <Redis ms>`` to the run log
``SHARDQ_BENCH_RUNLOG`` with one O_APPEND write.  The Redis clock is the worker's
extrapolation from the fetch that delivered the job (``Job.redis_now_ms``): the bench
cluster's primaries share one host clock, so it compares with a batch's ``ended_ms``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from shardq import Job

_fd = os.open(os.environ["SHARDQ_BENCH_RUNLOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _record(event: str, job: Job) -> None:
    at = job.redis_now_ms(time.monotonic())
    os.write(_fd, f"{event} {job.id} {job.batch_id or '-'} {at:.3f}\n".encode())


def noop(job: Job) -> None:
    """The same handler for a plain job, a batch child and the cost phase's callbacks."""


def late_child(job: Job) -> None:
    _record("F", job)


def late_callback(job: Job) -> None:
    _record("C", job)


def register(worker: Any) -> None:
    worker.register("bench", noop, inline=True)
    worker.register("late-child", late_child, inline=True)
    worker.register("late-callback", late_callback, inline=True)
