"""Heartbeat: the worker's membership and the claim on the deliveries it is running.

Every ``heartbeat_interval`` the worker heartbeats into the queue's worker set (recomputing
which partitions it reads eagerly), resets the idle time of every delivery it holds (so none is
reclaimed while it runs, however long the handler takes), stops handlers past their timeout,
and, when a member has gone from the fleet since the last beat, asks the recoverer to take that
member's deliveries over at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardq import metrics
from shardq.runtime.membership import Membership
from shardq.store import delivery, keys
from shardq.store.transport import AsyncTransport
from shardq.worker.executor import Executor
from shardq.worker.inflight import InFlight, WorkerStats

log = logging.getLogger("shardq.worker")


class Heartbeat:
    def __init__(
        self,
        transport: AsyncTransport,
        queue: str,
        pks: list[keys.PartitionKeys],
        consumer: str,
        membership: Membership | None,
        inflight: InFlight,
        executor: Executor,
        stats: WorkerStats,
        on_members: Callable[[list[str]], None],
        on_gone: Callable[[], None],
    ) -> None:
        self.transport = transport
        self.queue = queue
        self.pks = pks
        self.consumer = consumer
        self.membership = membership
        self.inflight = inflight
        self.executor = executor
        self.stats = stats
        self.on_members = on_members
        self.on_gone = on_gone
        self._gone_seen: set[str] = set()
        self._m_inflight = metrics.WORKER_INFLIGHT.labels(queue)

    async def beat(self) -> None:
        self.executor.watchdog()
        self._m_inflight.set(self.inflight.count)
        if self.membership is not None:
            await self.membership.beat()
            self.on_members(self.membership.live)
            gone = self.membership.displaceable
            if gone - self._gone_seen:
                self.on_gone()
            self._gone_seen = gone
        await self.touch()

    async def touch(self) -> None:
        """Reset the idle time of every delivery this worker holds."""
        parts: list[int] = []
        ops = []
        for p, table in self.inflight.by_partition.items():
            held = list(table)
            for lo in range(0, len(held), delivery.MAX_TOUCH):
                parts.append(p)
                ops.append(
                    delivery.touch(self.pks[p], self.consumer, held[lo : lo + delivery.MAX_TOUCH])
                )
        failed: list[BaseException] = []
        for p, result in zip(parts, await self.transport.run_many(ops), strict=True):
            if isinstance(result, BaseException):
                failed.append(result)
                continue
            if result:
                self.stats.lost_deliveries += len(result)
                metrics.WORKER_LOST.labels(self.queue).inc(len(result))
                log.warning(
                    "partition %d: %d deliveries were reclaimed by another worker while running "
                    "(paused past visibility_timeout?); they may run twice",
                    p,
                    len(result),
                )
        if failed:
            raise failed[0]  # logged and counted by the supervisor; the rest were touched
