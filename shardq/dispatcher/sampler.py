"""Sampler: per-partition figures for Prometheus, read by the partition's owner.

Every ``metrics_interval`` the dispatcher snapshots the partitions it holds (backlog, lag,
pending, dead letters, the scripts' counters), so a scrape never touches Redis and the fleet
reads each partition about once per interval.  The owner of the first partition snapshots every
partition for the hot-shard figures.  Partitions whose snapshot failed (their primary is down)
keep their last figures until the next success or until the lease is lost or released, when
:class:`~shardq.dispatcher.leases.Leases` drops them at once.

A *still* partition is read less often: one whose snapshot is the same as the one before it
(counters, dead letters, flags: nothing happened in between) and holds nothing whose figures
age by themselves (no job ready, pending, overdue or due within :data:`STILL_MAX_SKIP` + 1
intervals).  It skips :data:`STILL_MAX_SKIP` rounds before its next snapshot; anything the
dispatcher sees happen there (a hint on its due channel, a promote that moved jobs, a lease
won) ends the skipping, and a snapshot that differs from the one before starts it over.  What
this process does not see (a job enqueued straight into the ready stream and run at once, an
operator's pause or dead-letter purge) shows up at the next snapshot: the figures of a still
partition are at most ``(STILL_MAX_SKIP + 1) * metrics_interval`` old (30 s by default),
against ``metrics_interval`` for any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardq import metrics
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.logs import log_event
from shardq.store import inspection, keys

log = logging.getLogger("shardq.dispatcher")

# The most rounds a still partition skips in a row (see the module docstring): its figures
# are then at most 6 intervals old, 30 s at the default metrics_interval, a bound chosen to
# stay within one Prometheus scrape interval of the usual 15-60 s.  Sampling every partition
# every interval cost an idle queue P / metrics_interval partition-stats calls per second
# (12.8/s at P = 64), the largest share of its Redis CPU after the idle promotes.
STILL_MAX_SKIP = 5


def still(
    snap: inspection.PartitionSnapshot, before: inspection.PartitionSnapshot | None, horizon_ms: int
) -> bool:
    """Whether ``snap`` can stand for the partition for a while: the same as ``before`` (the
    read time aside) and nothing in it ages within ``horizon_ms`` (no job ready, pending or
    overdue, none coming due sooner)."""
    if before is None or snap.ready or snap.pending or snap.overdue or snap.malformed:
        return False  # (a malformed figure is counted and reported every round: never still)
    if snap.oldest_due_ms is not None and snap.oldest_due_ms - snap.now_ms <= horizon_ms:
        return False
    # Field by field (dataclasses.replace and == cost a tenth of a millisecond a partition).
    return (
        snap.due == before.due
        and snap.oldest_due_ms == before.oldest_due_ms
        and snap.ready == before.ready
        and snap.pending == before.pending
        and snap.dead == before.dead
        and snap.consumers == before.consumers
        and snap.node == before.node
        and snap.counters == before.counters
    )


class Sampler:
    def __init__(
        self,
        ctx: DispatcherContext,
        *,
        leases: Leases,
        activity: Callable[[int], int] = lambda p: 0,
    ) -> None:
        """It samples the partitions ``leases`` holds (all of them while it holds 0);
        ``activity(p)``: jobs promoted so far in a partition (the promoter's count), a change
        of which ends a still partition's skipping."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.leases = leases
        self.activity = activity
        self.hot = metrics.HotShardWatch(ctx.queue, ctx.settings.hot_multiple)
        self._warned: set[tuple[int, str]] = set()
        #: The last snapshot of each partition sampled, and the one before it.
        self.last: dict[int, inspection.PartitionSnapshot] = {}
        self.skip: dict[int, int] = {}  # rounds left to skip, per partition
        #: Partitions touched since their snapshot was asked for (a reply must not make them
        #: still: it may predate what touched them).
        self.touched: set[int] = set()
        self.seen: dict[int, int] = {}  # activity(p) at its last snapshot
        self.horizon_ms = round((STILL_MAX_SKIP + 1) * ctx.settings.metrics_interval * 1000)
        leases.when_acquired(self.touch)

    def touch(self, partition: int) -> None:
        """Something happened in ``partition`` (a hint, a lease won): snapshot it next round."""
        self.skip.pop(partition, None)
        self.touched.add(partition)

    def _due(self, wanted: list[int]) -> list[int]:
        """The partitions of ``wanted`` to snapshot this round (the others skip it)."""
        due = []
        for p in wanted:
            promoted = self.activity(p)
            if promoted != self.seen.get(p, promoted):
                self.touch(p)  # jobs promoted since its last snapshot was asked for
            left = self.skip.get(p, 0)
            if left > 0 and p in self.last:
                self.skip[p] = left - 1
            else:
                due.append(p)
                self.seen[p] = promoted
                self.touched.discard(p)
        return due

    async def round(self) -> None:
        owned = set(self.leases.tokens)
        # The holder of the first partition samples them all (the backlog of unheld ones too).
        first = min(self.pks)
        sample_all = first in owned
        wanted = list(self.pks) if sample_all else sorted(owned)
        keep = set(wanted)
        for p in [p for p in self.last if p not in keep]:
            self._forget(p)
        due = self._due(wanted)
        ops = [
            inspection.partition_stats(self.pks[p], self.transport.node_name(self.pks[p].due))
            for p in due
        ]
        results = await self.transport.run_many(ops)
        fresh = [r for r in results if not isinstance(r, BaseException)]
        self._malformed(fresh)
        for p, r in zip(due, results, strict=True):
            if isinstance(r, BaseException):
                self.skip.pop(p, None)  # its last figures stand; tried again next round
                continue
            # Two snapshots alike in a row, nothing ageing, nothing touched it since it was
            # asked for: skip the most rounds at once (what ends the skipping early is an event,
            # not a guess at how soon one comes).
            quiet = p not in self.touched and still(r, self.last.get(p), self.horizon_ms)
            self.skip[p] = STILL_MAX_SKIP if quiet else 0
            self.last[p] = r
        # Every wanted partition's latest snapshot, fresh or standing in for a still one: the
        # hot-shard window computes rates from them (a partition left out would read as new).
        snaps = [self.last[p] for p in wanted if p in self.last]
        # A lease lost while the snapshots were on the way was dropped from the export then;
        # this round must not bring it back.
        owned &= set(self.leases.tokens)
        metrics.PARTITIONS.update(self.queue, snaps, owned)
        if sample_all:
            metrics.PARTITIONS.hot_from[self.queue] = first
            self.hot.observe(snaps)
        else:
            metrics.PARTITIONS.hot.pop(self.queue, None)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed and not fresh:
            raise failed[0]

    def _forget(self, partition: int) -> None:
        for table in (self.last, self.skip, self.seen):
            table.pop(partition, None)
        self.touched.discard(partition)

    def _malformed(self, snaps: list[inspection.PartitionSnapshot]) -> None:
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
                fields=[
                    f"partition {keys.label_of_fleet_id(p)} {name}={raw}"
                    for (p, name), raw in sorted(bad.items())
                ][:20],
                action="left out of the metrics; HSET a number or HDEL the field of the "
                "partition's stats hash",
            )

    def forget(self) -> None:
        metrics.PARTITIONS.forget(self.queue)
