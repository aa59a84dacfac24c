"""Recoverer: takes over deliveries whose worker is gone, and those idle past the visibility
timeout.

A worker reclaims on the partitions assigned to it (so the fleet covers every partition once),
every ``reclaim_interval`` and at once when the heartbeat sees a member leave the fleet (or at
start, when this worker replaced a predecessor of its own instance).  A delivery of a consumer
that is not a live member is taken once idle a couple of heartbeats (its worker stopped
touching it); any delivery is taken once idle past the visibility timeout.  A job delivered
``max_deliveries`` times without an ack is dead-lettered as poison instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from shardq import metrics
from shardq.config import WorkerSettings
from shardq.runtime.membership import Membership
from shardq.runtime.supervisor import Supervisor
from shardq.store import delivery, keys
from shardq.store.transport import AsyncTransport
from shardq.worker.executor import Executor
from shardq.worker.inflight import InFlight, WorkerStats


class Recoverer:
    def __init__(
        self,
        supervisor: Supervisor,
        transport: AsyncTransport,
        queue: str,
        pks: list[keys.PartitionKeys],
        consumer: str,
        settings: WorkerSettings,
        membership: Membership | None,
        assigned: Callable[[], set[int]],
        inflight: InFlight,
        executor: Executor,
        stats: WorkerStats,
    ) -> None:
        self.supervisor = supervisor
        self.transport = transport
        self.queue = queue
        self.pks = pks
        self.consumer = consumer
        self.settings = settings
        self.membership = membership
        self.assigned = assigned
        self.inflight = inflight
        self.executor = executor
        self.stats = stats
        self.rounds = 0
        self._now = asyncio.Event()
        self._now.set()  # a first round at start: a predecessor's deliveries come back at once

    def trigger(self) -> None:
        """A member left the fleet: reclaim now instead of at the next interval."""
        self._now.set()

    async def loop(self) -> None:
        stop = self.supervisor.stop_event("recoverer")
        state = self.supervisor.state("recoverer")
        while not stop.is_set():
            state.progress()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._now.wait(), self.settings.reclaim_interval)
            if stop.is_set():
                return
            self._now.clear()
            await self.round()
            state.ok()

    async def round(self) -> None:
        s = self.settings
        room = self.inflight.room()
        if room <= 0:
            return
        count = max(1, min(s.fetch_batch, room))
        live = self.membership.live if self.membership is not None else [self.consumer]
        mine = sorted(self.assigned())
        orphan_idle_ms = round(2 * s.heartbeat_interval * 1000)
        ops = [
            delivery.reclaim(
                self.pks[p],
                self.consumer,
                visibility_ms=round(s.visibility_timeout * 1000),
                orphan_idle_ms=orphan_idle_ms,
                live=live,
                count=count,
                max_deliveries=s.max_deliveries,
            )
            for p in mine
        ]
        results = await self.transport.run_many(ops)
        self.rounds += 1
        now = time.monotonic()
        failed: list[BaseException] = []
        for p, result in zip(mine, results, strict=True):
            if isinstance(result, BaseException):
                failed.append(result)
                metrics.SCRIPT_ERRORS.labels(self.queue, "reclaim", type(result).__name__).inc()
                continue
            for item in result.jobs:
                self.stats.reclaimed += 1
                metrics.WORKER_RECLAIMED.labels(self.queue).inc()
                self.executor.start(p, item, result.now_ms, now)
        if failed and len(failed) == len(results):
            raise failed[0]
