"""The handler of `shardq worker run` in the BullMQ comparison (bench/baselines/steady.py):
one line per run, ``<job id> <lateness ms>``, appended to ``SHARDQ_BENCH_RUNLOG`` with one
O_APPEND write, as every consumer of the comparison does (bench/baselines/record.py).
Registered inline (``@shardq.inline``: run on the worker's loop, no thread hop), like a no-op
handler a user would write.

    shardq worker run --queue Q --handlers bench.handlers.baseline_runlog:register
"""

from __future__ import annotations

import os
import time
from typing import Any

from bench.baselines.record import RunLog
from shardq import Job

_log = RunLog(os.environ["SHARDQ_BENCH_RUNLOG"])


def job(j: Job) -> None:
    late = 0.0 if j.due_ms is None else j.redis_now_ms(time.monotonic()) - j.due_ms
    _log.record(j.id, late)


def register(worker: Any) -> None:
    worker.register("job", job, inline=True)
