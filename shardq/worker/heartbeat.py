"""Heartbeat: the worker's membership and the claim on the deliveries it is running.

Two loops, every ``heartbeat_interval`` each.  ``membership`` heartbeats into the queue's
worker set (recomputing which partitions it reads eagerly) and, when a member has gone from the
fleet since the last beat (or is missing after a gap in this worker's own beats), asks the
recoverer to take that member's deliveries over at once: membership is the fleet's liveness,
one call per worker, and the recoverer acts on its events instead of probing every partition.
``heartbeat`` resets the idle time of every delivery the worker holds (so none is reclaimed
while it runs, however long the handler takes) and stops handlers past their timeout.  They are
apart so that touches waiting on a stalled primary never delay the membership heartbeat: a
worker whose heartbeat lapsed looks dead to its peers, which then take its running jobs over
and run them a second time.  The touches go out per primary
(:class:`~shardq.runtime.pernode.PerPrimaryCalls`): a stalled primary's touches finish in the
background while the other primaries' deliveries keep being touched on time.

A running job is stopped as cancelled only once a touch has read in Redis that its envelope is
gone (lua/touch-3.lua): a ``cancel:<id>`` message on the ready-hint channel (which any role may
publish) makes a touch of that one delivery at once, and the heartbeat looks at every held
job's envelope while the partition's cancels set is not empty (a producer may write it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from shardq.metrics import registry as metrics
from shardq.runtime.pernode import PerPrimaryCalls
from shardq.store import delivery, keys
from shardq.worker.context import WorkerContext
from shardq.worker.executor import Executor
from shardq.worker.inflight import Delivery

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
        self._live_seen: set[str] = set()
        self._m_inflight = metrics.WORKER_INFLIGHT.labels(ctx.queue)
        self.calls = PerPrimaryCalls(ctx.transport, "heartbeat")
        # How long a round waits for a primary's touches before going on without it: half
        # the interval.
        self.wait = ctx.settings.heartbeat_interval / 2
        #: Deliveries a cancel's publish named whose touch is out: (partition, entry id).
        self._looking: set[tuple[int, bytes]] = set()
        self._looks: set[asyncio.Task[None]] = set()

    async def members(self) -> None:
        """Heartbeat into the fleet and act on who is live (the ``membership`` loop)."""
        if self.membership is None:
            return
        await self.membership.beat()
        live = set(self.membership.live)
        self.on_members(self.membership.live)
        gone = self.membership.displaceable
        # Missing since this worker's last beat that succeeded: gone, or (after a gap in this
        # worker's own beats, when the membership's view starts afresh and names nobody gone)
        # expired unseen meanwhile.  Either way its deliveries are the recoverer's now: that
        # event, not a periodic probe of every partition, is what brings them back.
        if gone - self._gone_seen or self._live_seen - live:
            self.on_gone()
        self._gone_seen = gone
        self._live_seen = live

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
            held = [(d.entry_id, d.raw_id) for d in table.values()]
            # A worker may hold more deliveries of one partition than one touch call takes.
            for lo in range(0, len(held), delivery.MAX_TOUCH):
                parts.append(p)
                ops.append(
                    delivery.touch(self.pks[p], self.consumer, held[lo : lo + delivery.MAX_TOUCH])
                )

        def touched(indexes: list[int], results: list[object]) -> None:
            for i, reply in zip(indexes, results, strict=True):
                if isinstance(reply, delivery.Touched):
                    self._touched(parts[i], reply)

        report = await self.calls.run(ops, touched, self.wait)
        if report.errors:
            raise report.errors[0]  # logged and counted by the supervisor; the rest were touched

    def _touched(self, partition: int, reply: delivery.Touched) -> None:
        for job_id in reply.cancelled:
            # Cancelled while running (the touch read that its envelope is gone): stop it now.
            self.executor.cancel_running(partition, job_id)
        if reply.lost:
            self.stats.lost_deliveries += len(reply.lost)
            metrics.WORKER_LOST.labels(self.queue).inc(len(reply.lost))
            log.warning(
                "partition %s: %d deliveries were reclaimed by another worker while "
                "running (paused past visibility_timeout?); they may run twice",
                keys.label_of_fleet_id(partition),
                len(reply.lost),
            )

    def cancel_hint(self, partition: int, job_id: bytes) -> None:
        """A ``cancel:<id>`` message on the partition's ready-hint channel: when this worker
        runs that job, touch its delivery at once, reading whether its envelope is gone (a
        cancel removed it) before stopping it.  One touch per delivery at a time, however
        many messages come."""
        d = self.executor.holding(partition, job_id)
        if d is None or (partition, d.entry_id) in self._looking:
            return
        self._looking.add((partition, d.entry_id))
        task = asyncio.get_running_loop().create_task(self._look(partition, [d]))
        self._looks.add(task)
        task.add_done_callback(self._looks.discard)

    async def _look(self, partition: int, held: Sequence[Delivery]) -> None:
        pairs = [(d.entry_id, d.raw_id) for d in held]
        try:
            reply = await self.transport.run(
                delivery.touch(self.pks[partition], self.consumer, pairs, look=True)
            )
        except Exception as exc:
            # The heartbeat looks again within an interval (a cancel leaves its set non-empty).
            log.info("partition %d: looking for a running cancel failed: %r", partition, exc)
            return
        finally:
            for d in held:
                self._looking.discard((partition, d.entry_id))
        self._touched(partition, reply)
        confirmed = set(reply.cancelled)
        self.stats.cancels_ignored += sum(1 for d in held if d.raw_id not in confirmed)

    async def close(self) -> None:
        """Stop the touches still out (shutdown)."""
        for task in list(self._looks):
            task.cancel()
        await asyncio.gather(*self._looks, return_exceptions=True)
        await self.calls.close()
