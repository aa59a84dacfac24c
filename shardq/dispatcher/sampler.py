"""Sampler: per-partition figures for Prometheus, read by the partition's owner.

Every ``metrics_interval`` the dispatcher snapshots the partitions it holds (backlog, lag,
pending, dead letters, the scripts' counters), so a scrape never touches Redis and the fleet
reads each partition about once per interval.  The owner of partition 0 snapshots every
partition for the hot-shard figures.  Partitions whose snapshot failed (their primary is down)
keep their last figures until the next success or until the lease is lost or released, when
:class:`~shardq.dispatcher.leases.Leases` drops them at once.
"""

from __future__ import annotations

import logging

from shardq import metrics
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.logs import log_event
from shardq.store import inspect

log = logging.getLogger("shardq.dispatcher")


class Sampler:
    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        """It samples the partitions ``leases`` holds (all of them while it holds 0)."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.leases = leases
        self.hot = metrics.HotShardWatch(ctx.queue, ctx.settings.hot_multiple)
        self._warned: set[tuple[int, str]] = set()

    async def round(self) -> None:
        owned = set(self.leases.tokens)
        # The holder of the first partition samples them all (the backlog of unheld ones too).
        sample_all = min(self.pks) in owned
        wanted = list(self.pks) if sample_all else sorted(owned)
        ops = [
            inspect.partition_stats(self.pks[p], self.transport.node_name(self.pks[p].due))
            for p in wanted
        ]
        results = await self.transport.run_many(ops)
        snaps = [r for r in results if not isinstance(r, BaseException)]
        self._malformed(snaps)
        # A lease lost while the snapshots were on the way was dropped from the export then;
        # this round must not bring it back.
        owned &= set(self.leases.tokens)
        metrics.PARTITIONS.update(self.queue, snaps, owned)
        if sample_all:
            self.hot.observe(snaps)
        else:
            metrics.PARTITIONS.hot.pop(self.queue, None)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed and not snaps:
            raise failed[0]

    def _malformed(self, snaps: list[inspect.PartitionSnapshot]) -> None:
        """Count unreadable counters and figures every round; say which once per distinct
        set (a hand-written ``inf`` stays until someone fixes it)."""
        bad = {(s.partition, name): raw for s in snaps for name, raw in s.malformed.items()}
        if not bad:
            return
        metrics.MALFORMED.labels(self.queue, "stats").inc(len(bad))
        if set(bad) != self._warned:
            self._warned = set(bad)
            log_event(
                log,
                "record.malformed",
                logging.WARNING,
                queue=self.queue,
                fields=[f"partition {p} {name}={raw}" for (p, name), raw in sorted(bad.items())][
                    :20
                ],
                action="left out of the metrics; HSET a number or HDEL the field of the "
                "partition's stats hash",
            )

    def forget(self) -> None:
        metrics.PARTITIONS.forget(self.queue)
