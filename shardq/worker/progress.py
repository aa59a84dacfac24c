"""Progress: what handlers report with ``job.progress(value)``, coalesced and written.

A report is checked at once in the handler's own thread or task (JSON, at most
:data:`shardq.jobs.MAX_PROGRESS_BYTES`: ProgressError there), then only remembered: the latest
value per running job.  Every :data:`PROGRESS_INTERVAL` (rounded down to the process's grid:
0.75 s at the default heartbeat_interval) the ``progress`` loop writes each remembered value
once (lua/progress-2.lua, written only while the job runs), so a handler that reports ten
thousand times a second costs Redis one or two calls per second, and one that reports nothing
costs nothing.  A write that fails is dropped (the next report goes out as usual):
progress is advisory, never a reason to fail a job.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import orjson

from shardq.errors import ProgressError
from shardq.jobs import MAX_PROGRESS_BYTES, Job
from shardq.metrics import registry as metrics
from shardq.store import progress as progress_ops
from shardq.store.op import Op
from shardq.worker.context import WorkerContext

log = logging.getLogger("shardq.worker")

#: Longest a report waits to be written; at most one write per job per interval.
PROGRESS_INTERVAL = 1.0


class ProgressReporter:
    """Remembers each running job's latest report; :meth:`flush` writes them."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self._lock = threading.Lock()  # sync handlers report from pool threads
        self._latest: dict[tuple[int, str], bytes] = {}

    def report(self, job: Job, value: Any) -> None:
        """``job.progress(value)``: check it, remember it (the latest one wins)."""
        try:
            data = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise ProgressError(
                f"job {job.id}: progress {type(value).__name__} cannot be encoded as JSON "
                f"({exc}): report dicts, lists, str, numbers, bool or None"
            ) from None
        if len(data) > MAX_PROGRESS_BYTES:
            raise ProgressError(
                f"job {job.id}: progress encodes to {len(data)} bytes, over {MAX_PROGRESS_BYTES}:"
                ' report a small summary, e.g. {"done": 40, "of": 100}'
            )
        with self._lock:
            self._latest[(job.partition, job.id)] = data

    async def flush(self) -> None:
        """Write every remembered report once (the ``progress`` loop)."""
        if not self._latest:
            return
        with self._lock:
            latest, self._latest = self._latest, {}
        ops: list[Op[bool]] = [
            progress_ops.write(self.pks[p], job_id, data)
            for (p, job_id), data in latest.items()
            if p in self.pks
        ]
        if not ops:
            return
        for result in await self.transport.run_many(ops):
            if isinstance(result, BaseException):
                metrics.SCRIPT_ERRORS.labels(self.queue, "progress", type(result).__name__).inc()
                log.debug("progress write failed (dropped): %r", result)
