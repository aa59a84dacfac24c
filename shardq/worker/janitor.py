"""Janitor: removes consumers left behind by crashed workers.

A worker killed with SIGKILL never retires its consumer name from the groups.  Once reclaim has
taken its deliveries and it has been idle past ``prune_consumers_after``, the worker assigned to
each partition removes it there.  Only consumers holding nothing are removed, so nothing can be
lost; a live worker idle that long is recreated by its next read.

A round every ``PRUNE_EVERY`` looks at a slice of the assigned partitions, at most
:data:`PRUNES_PER_S` a second (:class:`~shardq.runtime.sweep.Sweep`): a whole cycle takes
``max(PRUNE_EVERY, assigned / PRUNES_PER_S)`` (a minute up to 120 partitions a worker, ~2.3 h
at 16,384), so a crashed worker's consumer is gone within ``prune_consumers_after`` plus that.
"""

from __future__ import annotations

import logging

from shardq.runtime.sweep import Sweep
from shardq.store import delivery
from shardq.worker.context import WorkerContext
from shardq.worker.fetcher import Fetcher

log = logging.getLogger("shardq.worker")

# How often (seconds) a worker looks for consumers of crashed workers to remove.
PRUNE_EVERY = 60.0
# Partitions one worker's janitor looks at per second, whatever its partitions: tidying up
# after crashed workers is no reason for an idle worker's cost to grow with P (one call per
# partition every minute: 273 calls/s at 16,384).
PRUNES_PER_S = 2.0


class Janitor:
    def __init__(self, ctx: WorkerContext, *, fetcher: Fetcher) -> None:
        """It prunes on the partitions ``fetcher`` reads eagerly (``fetcher.assigned``)."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.settings = ctx.settings
        self.fetcher = fetcher
        self.sweep = Sweep(PRUNES_PER_S, PRUNE_EVERY)

    async def round(self) -> None:
        idle_ms = round(self.settings.prune_consumers_after * 1000)
        mine = self.sweep.take(self.fetcher.assigned_sorted)
        if not mine:
            return
        results = await self.transport.run_many(
            [delivery.prune_consumers(self.pks[p], idle_ms) for p in mine]
        )
        removed = sum(r for r in results if isinstance(r, int))
        if removed:
            log.info("removed %d consumer(s) of crashed workers from %s", removed, self.queue)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed and len(failed) == len(results):
            raise failed[0]
