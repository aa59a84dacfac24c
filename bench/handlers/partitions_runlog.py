"""Handlers of the worker of bench/partitions.py: each run appends ``<job id> <lateness ms>`` to
the run log ``SHARDQ_BENCH_RUNLOG`` with one O_APPEND write (the format of
bench/baselines/record.py, which bench.baselines.scenarios.RunLogs reads), lateness on the
Redis clock (handler start minus due time, as the worker measures it).

- ``job``: the burst's jobs: records its start, then takes 0-2 ms (uniform; an ``asyncio.sleep``,
  so it runs as a task on the worker's loop, as a handler that waits on I/O would).
- ``probe``: one job per partition, due the moment the processes start: records its start and
  returns (inline), so the run log says when each partition was first served.

It imports nothing of ``bench``: the harness puts this directory on the worker's PYTHONPATH and
names it as a top-level module, so a worker run from another checkout (``--code``, whose own
``bench`` package comes first) finds it too::

    PYTHONPATH=CODE:bench/handlers shardq worker run --queue Q --handlers partitions_runlog:register
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

_fd = os.open(os.environ["SHARDQ_BENCH_RUNLOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def _record(job: Any) -> None:
    late = 0.0 if job.due_ms is None else job.redis_now_ms(time.monotonic()) - job.due_ms
    os.write(_fd, f"{job.id} {max(0.0, late):.3f}\n".encode())


async def job(j: Any) -> None:
    _record(j)
    await asyncio.sleep(random.uniform(0.0, 0.002))


def probe(j: Any) -> None:
    _record(j)


def register(worker: Any) -> None:
    worker.register("job", job)
    worker.register("probe", probe, inline=True)
