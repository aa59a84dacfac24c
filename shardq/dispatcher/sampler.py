"""Sampler: per-partition figures for Prometheus, read by the partition's owner.

Every ``metrics_interval`` the dispatcher snapshots the partitions it holds (backlog, lag,
pending, dead letters, the scripts' counters), so a scrape never touches Redis and the fleet
reads each partition about once per interval.  The owner of the first partition snapshots every
partition for the hot-shard figures.  Partitions whose snapshot failed (their primary is down)
keep their last figures until the next success or until the lease is lost or released, when
:class:`~shardq.dispatcher.leases.Leases` drops them at once.

A *still* partition is read less often: one whose snapshot is the same as the one before it
(counters, dead letters, flags: nothing happened in between) and holds nothing whose figures
age by themselves (no job ready, pending, overdue or due within the horizon).  It is left to a
safety net (shardq/runtime/pacing.py): read again after max((STILL_MAX_SKIP + 1) intervals,
held / :data:`IDLE_SAMPLE_RATE` seconds), at most 1.5x that, so the snapshots of still
partitions cost a process at most about IDLE_SAMPLE_RATE calls a second whatever the
partitions it holds.  Anything the dispatcher sees happen there (a hint on its due channel, a
promote that moved jobs, a lease won: :meth:`Sampler.touch`) ends the skipping, and a
snapshot that differs from the one before starts it over.  What this process does not see (a
job enqueued straight into the ready stream and run at once, an operator's pause or
dead-letter purge) shows up at the next snapshot: the figures of a still partition are at most
``1.5 * max((STILL_MAX_SKIP + 1) * metrics_interval, held / IDLE_SAMPLE_RATE)`` old (45 s at
the defaults up to 120 partitions a process, 384 s at 1,024, 1.7 h at 16,384), against
``metrics_interval`` for any other.  A still partition holds no job due within that horizon,
so no gauge of its ages by itself meanwhile: only such unseen changes wait for it.

Which partitions a round reads comes from a heap of their next rounds: a round costs the
process the partitions it reads (and, for the first partition's holder, the hot-shard window
over every partition's latest snapshot), not a look at every partition.
"""

from __future__ import annotations

import logging
import time

from shardq import metrics
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.logs import log_event
from shardq.runtime.duetimes import DueTimes
from shardq.runtime.pacing import SafetyNet
from shardq.store import inspection, keys

log = logging.getLogger("shardq.dispatcher")

# The most rounds a still partition skips in a row (see the module docstring): its figures
# are then at most 6 intervals old, 30 s at the default metrics_interval, a bound chosen to
# stay within one Prometheus scrape interval of the usual 15-60 s.  Sampling every partition
# every interval cost an idle queue P / metrics_interval partition-stats calls per second
# (12.8/s at P = 64), the largest share of its Redis CPU after the idle promotes.
STILL_MAX_SKIP = 5
#: Most snapshots a second of still partitions (see the module docstring).
IDLE_SAMPLE_RATE = 4.0
#: Most partitions one round reads (the rest are due at the next round).
ROUND_LIMIT = 4096
ONE_HEAP = ""


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
    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        """It samples the partitions ``leases`` holds (every partition while it holds the
        queue's first); each won at once, then as its snapshots and :meth:`touch` say."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.first = min(ctx.pks)
        self.leases = leases
        self.interval = ctx.settings.metrics_interval
        self.hot = metrics.HotShardWatch(ctx.queue, ctx.settings.hot_multiple)
        self._warned: set[tuple[int, str]] = set()
        #: The last snapshot of each partition sampled.
        self.last: dict[int, inspection.PartitionSnapshot] = {}
        #: Rounds are counted, and each partition's next round kept in a heap.
        self.rounds = 0
        self.next_round = DueTimes(lambda p: ONE_HEAP)
        self.sample_all = False
        #: Partitions touched since their snapshot was asked for (a reply must not make them
        #: still: it may predate what touched them).
        self.touched: set[int] = set()
        self.horizon_ms = round((STILL_MAX_SKIP + 1) * self.interval * 1000)
        self.net = SafetyNet(
            IDLE_SAMPLE_RATE, (STILL_MAX_SKIP + 1) * self.interval, lambda: len(self.next_round)
        )
        leases.when_acquired(self.touch)

    def touch(self, partition: int) -> None:
        """Something happened in ``partition`` (a hint, jobs promoted, a lease won): snapshot
        it next round."""
        if partition in self.pks:
            self.touched.add(partition)
            self.next_round.set(partition, self.rounds)

    def _due(self) -> list[int]:
        """The partitions to snapshot this round: those whose round came, still wanted."""
        owned = self.leases.tokens
        sample_all = self.first in owned
        if sample_all and not self.sample_all:
            # The first partition's holder samples them all (the backlog of unheld ones too).
            for p in self.pks:
                if p not in self.next_round:
                    self.next_round.set(p, self.rounds)
        self.sample_all = sample_all
        due = []
        for p in self.next_round.take(ONE_HEAP, self.rounds, ROUND_LIMIT):
            if sample_all or p in owned:
                due.append(p)
                self.touched.discard(p)
            else:
                self._forget(p)
        self.rounds += 1
        for p in due:  # read again next round unless its snapshot says otherwise
            self.next_round.set(p, self.rounds)
        return due

    async def round(self) -> None:
        due = self._due()
        ops = [
            inspection.partition_stats(self.pks[p], self.transport.node_name(self.pks[p].due))
            for p in due
        ]
        results = await self.transport.run_many(ops) if ops else []
        fresh = [r for r in results if not isinstance(r, BaseException)]
        self._malformed(fresh)
        now = time.monotonic()
        for p, r in zip(due, results, strict=True):
            if isinstance(r, BaseException):
                continue  # its last figures stand; tried again next round
            # Two snapshots alike in a row, nothing ageing, nothing touched it since it was
            # asked for: left to the safety net (what ends the skipping early is an event, not
            # a guess at how soon one comes).
            if p not in self.touched and still(r, self.last.get(p), self.horizon_ms):
                ahead = self.net.rounds_ahead(p, now, self.interval)
                self.next_round.set(p, self.rounds - 1 + ahead)
            self.last[p] = r
        # A lease lost while the snapshots were on the way was dropped from the export then;
        # this round must not bring it back.
        metrics.PARTITIONS.put(self.queue, fresh, self.leases.tokens)
        if self.sample_all:
            metrics.PARTITIONS.hot_from[self.queue] = self.first
            # Every partition's latest snapshot, fresh or standing in for a still one: the
            # hot-shard window computes rates from them (a partition left out would read as
            # new).
            self.hot.observe(list(self.last.values()))
        else:
            metrics.PARTITIONS.hot.pop(self.queue, None)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed and not fresh:
            raise failed[0]

    def _forget(self, partition: int) -> None:
        self.last.pop(partition, None)
        self.next_round.discard(partition)
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
