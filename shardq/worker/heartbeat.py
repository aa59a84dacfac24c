"""Heartbeat: the worker's membership and the claim on the deliveries it is running.

Two loops, every ``heartbeat_interval`` each.  ``membership`` heartbeats into the queue's
worker set (recomputing which partitions it reads eagerly) and, when a member has gone from the
fleet since the last beat, asks the recoverer to take that member's deliveries over at once.
``heartbeat`` resets the idle time of every delivery the worker holds (so none is reclaimed
while it runs, however long the handler takes) and stops handlers past their timeout.  They are
apart so that touches waiting on a stalled primary never delay the membership heartbeat: a
worker whose heartbeat lapsed looks dead to its peers, which then take its running jobs over
and run them a second time.  The touches go out per primary
(:class:`~shardq.runtime.pernode.PerPrimaryCalls`): a stalled primary's touches finish in the
background while the other primaries' deliveries keep being touched on time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardq.metrics import registry as metrics
from shardq.runtime.pernode import PerPrimaryCalls
from shardq.store import delivery, keys
from shardq.worker.context import WorkerContext
from shardq.worker.executor import Executor

log = logging.getLogger("shardq.worker")


class Heartbeat:
    def __init__(
        self,
        ctx: WorkerContext,
        *,
        executor: Executor,
        on_members: Callable[[list[str]], None],
        on_gone: Callable[[], None],
    ) -> None:
        """``on_members(live)``: the live fleet after each beat (the fetcher's assignment);
        ``on_gone()``: a member left since the last beat (the recoverer's trigger)."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.consumer = ctx.consumer
        self.membership = ctx.membership
        self.inflight = ctx.inflight
        self.executor = executor
        self.stats = ctx.stats
        self.on_members = on_members
        self.on_gone = on_gone
        self._gone_seen: set[str] = set()
        self._m_inflight = metrics.WORKER_INFLIGHT.labels(ctx.queue)
        self.calls = PerPrimaryCalls(ctx.transport, "heartbeat")
        # How long a round waits for a primary's touches before going on without it: half
        # the interval.
        self.wait = ctx.settings.heartbeat_interval / 2

    async def members(self) -> None:
        """Heartbeat into the fleet and act on who is live (the ``membership`` loop)."""
        if self.membership is None:
            return
        await self.membership.beat()
        self.on_members(self.membership.live)
        gone = self.membership.displaceable
        if gone - self._gone_seen:
            self.on_gone()
        self._gone_seen = gone

    async def beat(self) -> None:
        """Stop overdue handlers and touch every delivery held (the ``heartbeat`` loop)."""
        self.executor.watchdog()
        self._m_inflight.set(self.inflight.count)
        await self.touch()

    async def touch(self) -> None:
        """Reset the idle time of every delivery this worker holds."""
        parts: list[int] = []
        ops = []
        for p, table in self.inflight.by_partition.items():
            held = list(table)
            # A worker may hold more deliveries of one partition than one touch call takes.
            for lo in range(0, len(held), delivery.MAX_TOUCH):
                parts.append(p)
                ops.append(
                    delivery.touch(self.pks[p], self.consumer, held[lo : lo + delivery.MAX_TOUCH])
                )

        def touched(indexes: list[int], results: list[object]) -> None:
            for i, reply in zip(indexes, results, strict=True):
                if not isinstance(reply, delivery.Touched):
                    continue
                if reply.cancelled:
                    # A running cancel whose publish this worker missed: stop it now.
                    for job_id in reply.cancelled:
                        self.executor.cancel_running(parts[i], job_id)
                result = reply.lost
                if result:
                    p = parts[i]
                    self.stats.lost_deliveries += len(result)
                    metrics.WORKER_LOST.labels(self.queue).inc(len(result))
                    log.warning(
                        "partition %s: %d deliveries were reclaimed by another worker while "
                        "running (paused past visibility_timeout?); they may run twice",
                        keys.label_of_fleet_id(p),
                        len(result),
                    )

        report = await self.calls.run(ops, touched, self.wait)
        if report.errors:
            raise report.errors[0]  # logged and counted by the supervisor; the rest were touched
