"""Handlers of the worker processes of tests/fleet/test_workflow_faults.py: batch children,
chain steps and callbacks that record every start and finish in a ledger file.

    shardq worker run --handlers support.workflow_handlers:register   (PYTHONPATH=tests)

The ledger is ``SHARDQ_TEST_WORKFLOW_LEDGER``; each event is one line, written with one
O_APPEND ``write``, so a SIGKILLed worker keeps every line it wrote (and none half-written):

    <S|F> <job id> <type> <batch id> <batch index> <attempt> <deliveries> <pid> <epoch s> <json>

``S`` at the handler's start, ``F`` when it returns (the ack is sent after; a worker killed
between the two runs the job again, at least once).  The JSON is the step's ``job.previous``
at ``S`` and its return value at ``F`` (null for children and callbacks).  A file, not Redis:
a failover may lose writes to Redis, and the ledger is what the test checks Redis against.

A chain step returns ``{"trail": previous trail + [its index]}``, so step k must receive
exactly ``{"trail": [0, 1, ..., k-1]}`` (None for step 0): a step that ran out of order, or got
another step's value, shows in its ``previous``.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import orjson

from shardq import Job

_fd = os.open(
    os.environ["SHARDQ_TEST_WORKFLOW_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
)
_pid = os.getpid()
#: Seconds each handler holds its job (SHARDQ_TEST_WORKFLOW_HOLD): a worker SIGKILLed then
#: dies in the middle of some, whose jobs run again.
_hold = float(os.environ.get("SHARDQ_TEST_WORKFLOW_HOLD", "0"))


def _record(event: str, job: Job, value: Any) -> None:
    index = "-" if job.batch_index is None else str(job.batch_index)
    line = (
        (
            f"{event} {job.id} {job.type} {job.batch_id or '-'} {index} {job.attempt} "
            f"{job.deliveries} {_pid} {time.time():.6f} "
        ).encode()
        + orjson.dumps(value)
        + b"\n"
    )
    os.write(_fd, line)


async def child(job: Job) -> None:
    _record("S", job, None)
    await asyncio.sleep(_hold)
    _record("F", job, None)


async def step(job: Job) -> dict[str, list[int]]:
    _record("S", job, job.previous)
    await asyncio.sleep(_hold)
    trail = list(job.previous["trail"]) if isinstance(job.previous, dict) else []
    value = {"trail": [*trail, job.batch_index]}
    _record("F", job, value)
    return value


async def callback(job: Job) -> None:
    _record("S", job, None)
    await asyncio.sleep(_hold)
    _record("F", job, None)


def register(worker: Any) -> None:
    worker.register("child", child)
    worker.register("step", step)
    worker.register("callback", callback)
