"""Recoverer: takes over deliveries whose worker is gone, and those idle past the visibility
timeout.

A worker reclaims on the partitions assigned to it (so the fleet covers every partition once),
on events rather than by probing every partition every ``reclaim_interval``:

- **a member left the fleet** (the heartbeat saw it gone, or missing after this worker's own
  gap in heartbeats): every assigned partition at once, again when the member's last
  deliveries are surely idle long enough (it may have touched them just before it died), and,
  in a fleet too large to name in the reclaim call (more than ``MAX_LIVE`` workers), once they
  are idle past the visibility timeout;
- **start-up**: every assigned partition at once (a predecessor's deliveries, and those of a
  worker that died before this one started, come back at once);
- **this worker left a delivery unclaimed** (:meth:`Recoverer.watch`, through
  :meth:`InFlight.left_pending <shardq.worker.inflight.InFlight.left_pending>`): a fetch or
  reclaim whose reply was lost (it may have delivered jobs this worker does not know it holds,
  so its heartbeat never touches them), a failure settle or a limit gate given up: that
  partition once the delivery is idle past the visibility timeout;
- **a safety net**: a rotating slice of the assigned partitions every ``reclaim_interval``, at
  most :data:`SWEEP_PROBES_PER_S` of them a second, so a whole cycle takes
  ``max(reclaim_interval, assigned / SWEEP_PROBES_PER_S)`` (5 s up to 80 partitions a worker,
  ~51 s at 1,024, ~17 min at 16,384).  It catches what no event announces: a worker that died
  while every member was cut off from the queue's membership (no one saw it go) or a pinned
  worker (no membership), a delivery idle past the visibility timeout whose live holder lost
  track of it through a fault this process did not see.

A delivery of a consumer that is not a live member is taken once idle a couple of heartbeats
(its worker stopped touching it); any delivery is taken once idle past the visibility timeout.
A job delivered ``max_deliveries`` times without an ack is dead-lettered as poison instead.
Each round first asks each partition whether a delivery is idle long enough (XPENDING IDLE, a
plain command) and sends the reclaim script only there.  The calls go out per primary
(:class:`~shardq.runtime.pernode.PerPrimaryCalls`): the deliveries of a dead worker on healthy
primaries are taken over at once even while another primary is stalled.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from typing import Any

from shardq.metrics import registry as metrics
from shardq.runtime.pernode import PerPrimaryCalls
from shardq.runtime.sweep import Sweep
from shardq.runtime.waits import wait_event_until
from shardq.store import delivery
from shardq.worker.context import WorkerContext
from shardq.worker.executor import Executor
from shardq.worker.fetcher import Fetcher

# The safety-net sweep's XPENDING probes per second of one worker, whatever its partitions:
# what a worker costs Redis idle must not grow with the partitions it serves (every one used to
# be probed every reclaim_interval: 204.8 probes/s at P = 1,024).  At 16 a second a worker of
# up to 80 partitions still probes each every reclaim_interval (5 s), as before; past that the
# sweep's cycle grows (assigned / 16 s), and only what no event announces waits for it.
SWEEP_PROBES_PER_S = 16.0
# How long after a delivery is idle past the visibility timeout its watched partition is
# probed (a round trip and a heartbeat's jitter).
WATCH_SLACK = 0.25
LATE, SOON = 0, 1


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
        #: Wakes the loop to look at what is due now (an event, a watched partition).
        self.now = asyncio.Event()
        #: A round over every assigned partition is due (start-up, a member left).
        self._full = False
        #: When more full rounds are due (a member's last deliveries idle long enough).
        self._follow_ups: list[float] = []
        #: (when, partition, kind): partitions to probe then.  LATE: this worker left a
        #: delivery there unclaimed (probe once it is idle past the visibility timeout; a later
        #: one moves the time later, one entry a partition); SOON: a round could not finish
        #: there (its primary busy or failing).
        self._watch: list[tuple[float, int, int]] = []
        self._late: dict[int, float] = {}
        self._soon: dict[int, float] = {}
        #: Partitions to look at again at once (a reclaim brought a full batch, or no room).
        self._again: set[int] = set()
        self.sweep = Sweep(SWEEP_PROBES_PER_S, self.settings.reclaim_interval)
        self._next_sweep = 0.0
        self.calls = PerPrimaryCalls(ctx.transport, "recoverer")
        #: Partitions probed by kind, for tests and the idle benchmarks.
        self.probed = {"full": 0, "sweep": 0, "watch": 0}
        self.trigger()  # at start: a predecessor's deliveries come back at once

    @property
    def orphan_idle(self) -> float:
        """How long a delivery of a worker that left must have gone untouched."""
        return 2 * self.settings.heartbeat_interval

    def cycle(self) -> float:
        """How long the safety-net sweep takes over the assigned partitions now."""
        return self.sweep.cycle(len(self.fetcher.assigned), self.settings.reclaim_interval)

    def trigger(self) -> None:
        """A member left the fleet: reclaim now on every assigned partition, and once more when
        its last deliveries are surely idle long enough (it may have touched them just before
        it died); in a fleet too large to be named in the reclaim call, also once they are idle
        past the visibility timeout (the only bound the script applies then)."""
        now = time.monotonic()
        self._full = True
        self._follow_ups.append(now + self.orphan_idle + 0.1)
        live = self.membership.live if self.membership is not None else ()
        if len(live) > delivery.MAX_LIVE:
            self._follow_ups.append(now + self.settings.visibility_timeout + WATCH_SLACK)
        self.now.set()

    def watch(self, partition: int, after: float | None = None) -> None:
        """This worker may hold a delivery of ``partition`` it no longer claims (a lost reply,
        a settle given up): probe the partition once it is idle past the visibility timeout
        (or ``after`` seconds from now)."""
        now = time.monotonic()
        if after is None:
            at = now + self.settings.visibility_timeout + WATCH_SLACK
            old = self._late.get(partition)
            self._late[partition] = at if old is None else max(old, at)
            if old is None:  # else its entry is pushed on to this time when it comes up
                heapq.heappush(self._watch, (at, partition, LATE))
        else:
            at = now + after
            old = self._soon.get(partition)
            if old is not None and old <= at:
                return
            self._soon[partition] = at
            heapq.heappush(self._watch, (at, partition, SOON))
        self.now.set()  # the loop may sleep past it: let it look again

    def _watched(self, now: float) -> set[int]:
        """The watched partitions due by ``now``, taken off the watch."""
        out: set[int] = set()
        heap = self._watch
        while heap and heap[0][0] <= now:
            at, p, kind = heapq.heappop(heap)
            times = self._late if kind == LATE else self._soon
            current = times.get(p)
            if current is None or (kind == SOON and current != at):
                continue  # stale: taken already, or set earlier since
            if current > at:  # LATE moved on: its one entry moves with it
                heapq.heappush(heap, (current, p, kind))
                continue
            del times[p]
            out.add(p)
        return out

    def _next_at(self) -> float:
        """When the loop has something to do next, at the latest."""
        at = self.supervisor.on_tick(self._next_sweep)
        if self._follow_ups:
            at = min(at, min(self._follow_ups))
        if self._watch:
            at = min(at, self._watch[0][0])
        return at

    async def loop(self) -> None:
        stop = self.supervisor.stop_event("recoverer")
        state = self.supervisor.state("recoverer")
        self._next_sweep = time.monotonic() + self.settings.reclaim_interval
        while not stop.is_set():
            state.progress()
            if not (self._full or self._again):
                # Longest wait: a reclaim_interval (the next slice of the sweep, on the grid).
                await wait_event_until(self.now, self._next_at())
                if stop.is_set():
                    return
            self.now.clear()
            outcome = await self.round()
            if outcome == "no room":
                # No room right now (handlers busy, or a fetch round holds it for a moment):
                # try again shortly rather than a whole interval later.
                await asyncio.sleep(0.05)
            state.ok()

    def _due(self, now: float) -> tuple[list[int], str]:
        """What this round looks at, and why (``full``, ``watch``, ``sweep``): taken off the
        schedule (call it only when the round goes)."""
        assigned = self.fetcher.assigned_sorted
        if self._follow_ups and min(self._follow_ups) <= now:
            self._follow_ups = [t for t in self._follow_ups if t > now]
            self._full = True
        wanted = set(self._again)
        self._again.clear()
        wanted |= self._watched(now)
        kind = "watch"
        if self._full:
            self._full = False
            wanted.update(assigned)
            kind = "full"
        elif now >= self._next_sweep:
            wanted.update(self.sweep.take(assigned))
            self._next_sweep = now + self.settings.reclaim_interval
            kind = "sweep"
        return sorted(wanted), kind

    def _has_due(self, now: float) -> bool:
        return bool(
            self._full
            or self._again
            or (self._follow_ups and min(self._follow_ups) <= now)
            or (self._watch and self._watch[0][0] <= now)
            or now >= self._next_sweep
        )

    async def round(self) -> str:
        """One round over what is due (see the module docstring): ``done``, ``more`` (some
        partition returned all it was asked for: it is looked at again at once) or ``no
        room`` (nothing taken off the schedule: it goes when room frees up)."""
        s = self.settings
        now = time.monotonic()
        if not self._has_due(now):
            return "done"
        room = self.inflight.room()
        if room <= 0:
            return "no room"
        partitions, kind = self._due(now)
        self.probed[kind] += len(partitions)
        live = self.membership.live if self.membership is not None else [self.consumer]
        visibility_ms = round(s.visibility_timeout * 1000)
        orphan_idle_ms = round(self.orphan_idle * 1000)
        mine = await self._candidates(partitions, min(visibility_ms, orphan_idle_ms))
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
                    # What it was to take is still there, and it may have taken some for
                    # this worker before its reply was lost: look again soon, and once those
                    # are idle past the visibility timeout.
                    self.watch(mine[i], s.reclaim_interval)
                    self.watch(mine[i])
                    continue
                if len(result.jobs) >= count:
                    more = True
                    self._again.add(mine[i])
                for item in result.jobs:
                    self.stats.reclaimed += 1
                    metrics.WORKER_RECLAIMED.labels(self.queue).inc()
                    self.executor.start(mine[i], item, result.now_ms, now)

        # Half an interval at most for a primary: a stalled one finishes in the background.
        report = await self.calls.run(ops, reclaimed, s.reclaim_interval / 2)
        for i in report.skipped:  # its primary still busy with an earlier batch
            self.watch(mine[i], s.reclaim_interval)
        self.rounds += 1
        if report.errors and len(report.errors) == len(ops):
            raise report.errors[0]
        return "more" if more else "done"

    async def _acks_written_first(self, partitions: list[int]) -> list[int]:
        """``partitions`` less those where this worker's own finished jobs still wait for their
        ack, once it tried to write those acks now.  A finished job's ack waits to ride with a
        read of its partition, or, while its primary fails over, for the new one: its delivery
        looks idle to the reclaim meanwhile, and one outage longer than the visibility timeout
        would make this worker take back and run again a job it ran.  A partition left out is
        looked at again a reclaim_interval later."""
        waiting = set(self.settler.partitions_with_acks()).intersection(partitions)
        if not waiting:
            return partitions
        await self.settler.flush(sorted(waiting))
        unsent = set(self.settler.partitions_with_acks())
        for p in unsent.intersection(partitions):
            self.watch(p, self.settings.reclaim_interval)
        return [p for p in partitions if p not in unsent]

    async def _candidates(self, partitions: list[int], idle_ms: int) -> list[int]:
        """The partitions of ``partitions`` with a delivery idle ``idle_ms`` or more: the only
        ones where the reclaim script can take one (it looks at exactly those, with the same
        XPENDING IDLE), asked with a plain command each, one batch per primary.  A partition
        with no pending entry, or only fresh ones (its workers touch them every heartbeat),
        costs Redis that command instead of the script.  A probe that failed counts as a
        candidate (the script reports its own error); one not sent (its primary still busy
        with an earlier batch) is looked at again a reclaim_interval later."""
        found: list[int] = []

        def probed(indexes: list[int], results: list[Any]) -> None:
            for i, result in zip(indexes, results, strict=True):
                if result is not False:  # True, or an exception: the script decides
                    found.append(partitions[i])

        ops = [delivery.reclaimable(self.pks[p], idle_ms) for p in partitions]
        report = await self.calls.run(ops, probed, self.settings.reclaim_interval / 2)
        for i in report.skipped:
            self.watch(partitions[i], self.settings.reclaim_interval)
        return sorted(found)
