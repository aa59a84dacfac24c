"""Recoverer: takes over deliveries whose worker is gone, and those idle past the visibility
timeout.

A worker reclaims on the partitions assigned to it (so the fleet covers every partition once),
every ``reclaim_interval`` and at once when the heartbeat sees a member leave the fleet (or at
start, when this worker replaced a predecessor of its own instance).  A delivery of a consumer
that is not a live member is taken once idle a couple of heartbeats (its worker stopped
touching it); any delivery is taken once idle past the visibility timeout.  A job delivered
``max_deliveries`` times without an ack is dead-lettered as poison instead.  The reclaim calls
go out per primary (:class:`~shardq.runtime.pernode.PerPrimaryCalls`): the deliveries of a dead
worker on healthy primaries are taken over at once even while another primary is stalled.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from shardq.metrics import registry as metrics
from shardq.runtime.pernode import PerPrimaryCalls
from shardq.runtime.waits import wait_event_until
from shardq.store import delivery
from shardq.worker.context import WorkerContext
from shardq.worker.executor import Executor
from shardq.worker.fetcher import Fetcher


class Recoverer:
    def __init__(self, ctx: WorkerContext, *, executor: Executor, fetcher: Fetcher) -> None:
        """It reclaims on the partitions ``fetcher`` reads eagerly (``fetcher.assigned``)."""
        self.supervisor = ctx.supervisor
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.consumer = ctx.consumer
        self.settings = ctx.settings
        self.membership = ctx.membership
        self.fetcher = fetcher
        self.inflight = ctx.inflight
        self.executor = executor
        self.settler = executor.settler
        self.stats = ctx.stats
        self.rounds = 0
        #: Set to reclaim at once (a member left; the loop's stop sets it too).
        self.now = asyncio.Event()
        self._follow_up: float | None = None
        self.calls = PerPrimaryCalls(ctx.transport, "recoverer")
        self.trigger()  # at start: a predecessor's deliveries come back at once

    @property
    def orphan_idle(self) -> float:
        """How long a delivery of a worker that left must have gone untouched."""
        return 2 * self.settings.heartbeat_interval

    def trigger(self) -> None:
        """A member left the fleet: reclaim now, and once more when its last deliveries are
        surely idle long enough (it may have touched them just before it died)."""
        self.now.set()
        self._follow_up = time.monotonic() + self.orphan_idle + 0.1

    async def loop(self) -> None:
        stop = self.supervisor.stop_event("recoverer")
        state = self.supervisor.state("recoverer")
        while not stop.is_set():
            state.progress()
            # On the process's grid: its periodic loops wake it then anyway.
            at = self.supervisor.on_tick(time.monotonic() + self.settings.reclaim_interval)
            if self._follow_up is not None:
                at = min(at, self._follow_up)
            await wait_event_until(self.now, at)
            if stop.is_set():
                return
            if self._follow_up is not None and time.monotonic() >= self._follow_up:
                self._follow_up = None
            self.now.clear()
            outcome = await self.round()
            if outcome == "no room":
                # No room right now (handlers busy, or a fetch round holds it for a moment):
                # try again shortly rather than a whole interval later.
                await asyncio.sleep(0.05)
                self.now.set()
            elif outcome == "more":
                self.now.set()  # a partition filled its share: there may be more to take
            state.ok()

    async def round(self) -> str:
        """One pass over the assigned partitions: ``done``, ``more`` (some partition returned
        all it was asked for) or ``no room``."""
        s = self.settings
        room = self.inflight.room()
        if room <= 0:
            return "no room"
        live = self.membership.live if self.membership is not None else [self.consumer]
        visibility_ms = round(s.visibility_timeout * 1000)
        orphan_idle_ms = round(self.orphan_idle * 1000)
        mine = await self._candidates(
            sorted(self.fetcher.assigned), min(visibility_ms, orphan_idle_ms)
        )
        mine = await self._acks_written_first(mine)
        if not mine:
            self.rounds += 1
            return "done"
        # Share the room among the partitions (a mass takeover after a crash stays near the
        # concurrency limit instead of claiming a batch per partition).
        count = max(1, min(s.fetch_batch, room // max(1, len(mine))))
        ops = [
            delivery.reclaim(
                self.pks[p],
                self.consumer,
                visibility_ms=visibility_ms,
                orphan_idle_ms=orphan_idle_ms,
                live=live,
                count=count,
                max_deliveries=s.max_deliveries,
            )
            for p in mine
        ]
        more = False

        def reclaimed(indexes: list[int], results: list[Any]) -> None:
            nonlocal more
            now = time.monotonic()
            for i, result in zip(indexes, results, strict=True):
                if isinstance(result, BaseException):
                    name = type(result).__name__
                    metrics.SCRIPT_ERRORS.labels(self.queue, "reclaim", name).inc()
                    continue
                more = more or len(result.jobs) >= count
                for item in result.jobs:
                    self.stats.reclaimed += 1
                    metrics.WORKER_RECLAIMED.labels(self.queue).inc()
                    self.executor.start(mine[i], item, result.now_ms, now)

        # Half an interval at most for a primary: a stalled one finishes in the background.
        report = await self.calls.run(ops, reclaimed, s.reclaim_interval / 2)
        self.rounds += 1
        if report.errors and len(report.errors) == len(ops):
            raise report.errors[0]
        return "more" if more else "done"

    async def _acks_written_first(self, partitions: list[int]) -> list[int]:
        """``partitions`` less those where this worker's own finished jobs still wait for their
        ack, once it tried to write those acks now.  A finished job's ack waits to ride with a
        read of its partition, or, while its primary fails over, for the new one: its delivery
        looks idle to the reclaim meanwhile, and one outage longer than the visibility timeout
        would make this worker take back and run again a job it ran."""
        waiting = set(self.settler.partitions_with_acks()).intersection(partitions)
        if not waiting:
            return partitions
        await self.settler.flush(sorted(waiting))
        unsent = set(self.settler.partitions_with_acks())
        return [p for p in partitions if p not in unsent]

    async def _candidates(self, partitions: list[int], idle_ms: int) -> list[int]:
        """The partitions of ``partitions`` with a delivery idle ``idle_ms`` or more: the only
        ones where the reclaim script can take one (it looks at exactly those, with the same
        XPENDING IDLE), asked with a plain command each, one batch per primary.  A partition
        with no pending entry, or only fresh ones (its workers touch them every heartbeat),
        costs Redis that command instead of the script: an idle queue's reclaim calls were
        P / reclaim_interval scripts a second (12.8/s at P = 64).  The visibility timeout and
        the orphan bound are the script's as before, and a partition that gains pending
        entries is asked again every round: nothing is reclaimed later than it was.  A probe
        that failed counts as a candidate (the script reports its own error); one not sent
        (its primary still busy with an earlier batch) waits for the next round, as the
        script would have."""
        found: list[int] = []

        def probed(indexes: list[int], results: list[Any]) -> None:
            for i, result in zip(indexes, results, strict=True):
                if result is not False:  # True, or an exception: the script decides
                    found.append(partitions[i])

        ops = [delivery.reclaimable(self.pks[p], idle_ms) for p in partitions]
        await self.calls.run(ops, probed, self.settings.reclaim_interval / 2)
        return sorted(found)
