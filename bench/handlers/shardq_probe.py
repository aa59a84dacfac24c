"""Handlers of the workers of bench/lanes_lateness.py (and bench/idle_primary.py): a no-op for
the bulk of the jobs, a run-log line for the probes whose lateness is measured.

- ``bench``: does nothing (the backlog of the priorities part, tenant A of the fair-sharing part).
- ``probe``: appends ``<job id> <start epoch s> <lateness ms> <priority> <tenant or ->`` to the
  run log ``SHARDQ_BENCH_RUNLOG`` with one O_APPEND write, as shardq_runlog.py does.  Lateness
  is on the Redis clock: handler start minus due time, as the worker measures it.

Both run inline on the worker's event loop.
"""

from __future__ import annotations

import os
import time
from typing import Any

from shardq import Job

_fd = os.open(os.environ["SHARDQ_BENCH_RUNLOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def bench(job: Job) -> None:
    """Nothing: the backlog."""


def probe(job: Job) -> None:
    late = job.redis_now_ms(time.monotonic()) - (job.due_ms or 0)
    # getattr: a revision before lanes (bench/idle_primary.py --reference) has neither field
    priority, tenant = getattr(job, "priority", "default"), getattr(job, "tenant", None)
    line = f"{job.id} {time.time():.4f} {max(0.0, late):.2f} {priority} {tenant or '-'}\n"
    os.write(_fd, line.encode())


def register(worker: Any) -> None:
    worker.register("bench", bench, inline=True)
    worker.register("probe", probe, inline=True)
