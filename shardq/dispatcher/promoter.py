"""Promoter: moves due jobs to the ready streams, one loop per Redis primary.

Each loop serves the held partitions its primary holds: it sends one promote call per due
partition in one batch on that primary's connection, then sleeps until the earliest deadline
of its partitions (at most :data:`~shardq.runtime.pernode.IDLE_PASS` in one pass), woken early
by hints.  A partition's deadline is
its head job's due time plus its slack under the lateness budget (shardq/runtime/budget.py:
0 without a budget); a round promotes every partition with a job due, not only those at
their deadline, so one round takes what the whole primary collected in the window.  A paused
or failing primary holds up its own loop only.  A hint that lands while a call for its
partition is in flight forces another call, so a reply computed before the hint cannot put
the partition back to sleep.

Workers go first.  A worker's read promotes its partition's due jobs itself (lua/fetch-9.lua)
when the head comes due plus the worker's share of the budget, so in steady state a job costs
one call, not a promote and a read.  The dispatcher therefore promotes a partition only once
its head is a whole budget late, and yields more when its calls find that a worker took the
jobs: each such call doubles the partition's extra wait, up to :data:`MAX_YIELD`; a call that
moves jobs already late by more than the budget (no worker read them: busy, dead, an older
version, or a backlog) ends the yielding at once.  Partitions with lanes on are promoted at
the dispatcher's share as before (their jobs go through the lane, which reads do not fill).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.errors import FencedError
from shardq.metrics import registry as metrics
from shardq.runtime.budget import DueRates, dispatcher_share
from shardq.runtime.duetimes import DueTimes
from shardq.runtime.pacing import SafetyNet
from shardq.runtime.pernode import IDLE_PASS, LONG_IDLE, PerPrimary
from shardq.runtime.supervisor import log_redirect
from shardq.runtime.waits import wait_event
from shardq.store import faults, fleet, keys

log = logging.getLogger("shardq.dispatcher")

# After a failed call a partition is tried again this much later; others keep being served.
ERROR_BACKOFF = 0.25
#: The most a partition's promote waits for workers' reads to promote it (seconds after its
#: head is due, beyond the budget): how late a job may start when the workers stop reading its
#: partition (a dead worker's, until the fleet splits its partitions again).
MAX_YIELD = 1.0
#: A promote that moves jobs later than the budget plus this (seconds) finds that no worker
#: read them: the dispatcher stops yielding the partition.
LATE_MARGIN = 0.02
#: Most promotes a second one dispatcher sends to partitions with no signal (no hint, no known
#: due time, no work lately): the safety net for a lost hint (shardq/runtime/pacing.py).  An
#: idle partition is looked at every max(max_idle_sleep, held / this) seconds (at most 1.5x
#: that after its last look), so an idle dispatcher's promotes stay at about this many a second
#: however many partitions it holds: 2.1/s at 64 partitions (their max_idle_sleep, as before),
#: 2/s at 16,384 (each looked at every ~2.3 h instead of every 30 s).
IDLE_PROMOTE_RATE = 2.0


class Promoter:
    """Per-primary promote loops over the partitions this dispatcher holds."""

    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        """It promotes the partitions ``leases`` holds, at once for each one won."""
        self.supervisor = ctx.supervisor
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = pks = ctx.pks
        self.leases = leases
        self.settings = ctx.settings
        self.hints: dict[int, int] = {}
        #: Held partitions found idle (nothing due before the fallback) that many times in a
        #: row: their fallback sleep doubles up to max_idle_sleep.  One without an entry has
        #: shown no work since this dispatcher started: it sleeps the longest at once.
        self.idle_streak: dict[int, int] = {}
        self.promoted = 0
        self.calls = 0
        self.errors = 0
        self.by_partition: dict[int, int] = {}
        #: Called with each partition a promote moved jobs in (the trimmer and the sampler
        #: act on that activity, not on a look at every partition each round).
        self.on_moved: list[Callable[[int], None]] = []
        #: The longest one pass of a loop sleeps (its partitions' own deadlines wake it sooner).
        self.longest_sleep = max(ctx.settings.max_sleep, IDLE_PASS)
        self.nodes = PerPrimary(
            ctx.supervisor,
            ctx.transport,
            "promoter",
            list(pks),
            lambda p: pks[p].due,
            self.longest_sleep,
        )
        #: When each held partition must be promoted by, its deadline (held ones only: set
        #: when won), and when its head job is due (a round takes every partition due by then).
        self.next_wake = DueTimes(self.nodes.node_of)
        self.due_at: dict[int, float] = {}
        #: When a partition with no signal is looked at again (the lost-hint safety net).
        self.net = SafetyNet(
            IDLE_PROMOTE_RATE,
            max(ctx.settings.max_idle_sleep, ctx.settings.max_sleep),
            lambda: max(len(leases.tokens), leases.target),
        )
        #: Each partition's due rate: its slack under the budget shrinks when calls fill sooner.
        self.rates = DueRates()
        self.share = dispatcher_share(ctx.settings.lateness_budget)
        self.budget = ctx.settings.lateness_budget
        #: How much longer than the budget each partition waits for workers to promote it
        #: (grows while its calls find nothing left to move; see the module docstring).
        self.yielded: dict[int, float] = {}
        #: Partitions with lanes on (the last promote said): promoted at the share.
        self.laned: set[int] = set()
        self._m_promoted = metrics.PROMOTED.labels(ctx.queue)
        self._m_calls = metrics.PROMOTE_CALLS.labels(ctx.queue)
        leases.when_acquired(self.acquired)

    def start(self) -> None:
        self.nodes.start(self._loop)

    def acquired(self, partition: int) -> None:
        """A lease was just won: promote at once.  Its idle streak stays: this dispatcher
        heard the partition's hints before it held it, so a winner's partition is no more at
        risk of a lost hint than any other (at start-up, every partition is won at once)."""
        self._schedule(partition, 0.0, 0.0)
        self.nodes.wake(partition)

    def hint(self, partition: int, *, resubscribed: bool = False) -> None:
        """An enqueue moved the partition's head earlier (or a retry came due): a job may be due
        now, so the partition is due now and promoted within its slack.  ``resubscribed``: the
        wake-up every partition gets after a (re)subscription, one look that leaves its idle
        streak as it was."""
        if partition in self.leases.tokens:
            if not resubscribed:  # (a resubscription's look is not news of work there)
                self.idle_streak[partition] = 0
                self.hints[partition] = self.hints.get(partition, 0) + 1
            now = time.monotonic()
            deadline = now + self._slack(partition)
            if partition in self.next_wake:  # never later than it already was
                deadline = min(deadline, self.next_wake.get(partition))
            self._schedule(partition, min(now, self.due_at.get(partition, now)), deadline)
            self.nodes.wake(partition)

    def _schedule(self, partition: int, due: float, deadline: float) -> None:
        """``partition``'s head is due at ``due`` and must be promoted by ``deadline``."""
        self.due_at[partition] = due
        self.next_wake.set(partition, deadline)

    def _due_in(self, partition: int, wait: float, now: float) -> None:
        """The head of ``partition`` is due ``wait`` seconds after ``now``: promote it then,
        within its slack."""
        due = now + wait
        self._schedule(partition, due, due + self._slack(partition))

    def _slack(self, partition: int) -> float:
        """How long after its head is due the partition is promoted: the dispatcher's share
        with lanes on, else the whole budget plus what it yields to workers' reads."""
        if partition in self.laned:
            return self.rates.slack(partition, self.share)
        return self.budget + self.yielded.get(partition, 0.0)

    def _yield(self, partition: int, result: fleet.Promoted, expected: bool) -> None:
        """Grow or end the partition's yielding to workers from a promote's answer (the module
        docstring): ``expected``, the call was made for a head believed due."""
        if result.lanes:
            self.laned.add(partition)
            self.yielded.pop(partition, None)
            return
        self.laned.discard(partition)
        if result.moved:
            oldest = result.oldest_moved_ms
            late = (
                oldest is not None and result.now_ms - oldest > (self.budget + LATE_MARGIN) * 1000
            )
            if late:
                self.yielded.pop(partition, None)  # no worker read them in time
        elif expected:
            before = self.yielded.get(partition, 0.0)
            self.yielded[partition] = min(MAX_YIELD, max(self.budget, 0.005, 2.0 * before))

    def _forget(self, partition: int) -> None:
        """Not ours any more: never handed out again."""
        self.next_wake.discard(partition)
        self.due_at.pop(partition, None)
        self.rates.forget(partition)
        self.yielded.pop(partition, None)
        self.laned.discard(partition)

    def _take(self, node: str, now: float, limit: int) -> list[int]:
        """The partitions of ``node`` to promote now: none until one reaches its deadline,
        then every one with a job due (a partition's deadline is at most ``share`` after its
        due time, so those are among the ones whose deadline is within ``share``)."""
        due_times = self.next_wake
        earliest = due_times.earliest(node)
        if earliest is None or earliest > now:
            return []
        if self.share <= 0.0:
            return due_times.take(node, now, limit)
        candidates = due_times.take(node, now + self.share, limit)
        due_at = self.due_at
        taken = [p for p in candidates if due_at.get(p, 0.0) <= now]
        if len(taken) < len(candidates):
            due_times.put_back(p for p in candidates if due_at.get(p, 0.0) > now)
        return taken

    async def _loop(self, node: str) -> None:
        name = self.nodes.loop_name(node)
        stop = self.supervisor.stop_event(name)
        state = self.supervisor.state(name)
        event = self.nodes.event(node)
        s = self.settings
        due_times = self.next_wake
        due_times.rebuild()  # (re)started: partitions a failed round had taken are due again
        generation = self.nodes.generation
        while not stop.is_set():
            state.progress()
            if generation != self.nodes.generation:  # partitions moved between primaries
                generation = self.nodes.generation
                due_times.rebuild()
            now = time.monotonic()
            due = self._take(node, now, s.max_inflight_calls)
            if due:
                await self._promote(node, due)
                state.ok()
                continue
            earliest = due_times.earliest(node)
            cap = self.supervisor.on_tick(now + self.longest_sleep) - s.coalesce
            wake_at = cap if earliest is None else min(earliest, cap)
            event.clear()
            state.ok()
            # Wait out the coalescing window too: partitions reaching their deadline within it
            # are then all due at once and share one round (one batch on this primary's
            # connection).  Every deadline is set before this sleep and every later one comes
            # with a wake-up (hint, won lease), so the loop sleeps until the earliest: an idle
            # loop wakes every IDLE_PASS, not every max_sleep.
            await wait_event(event, max(0.0, wake_at - now) + s.coalesce)

    async def _promote(self, node: str, partitions: list[int]) -> None:
        s = self.settings
        lease_ms = round(s.lease_ttl * 1000)
        tokens = self.leases.tokens
        held = []
        for p in partitions:
            if p in tokens:
                held.append(p)
            else:
                self._forget(p)  # released or lost since it was set: not ours
        if not held:
            return
        sent_tokens = [tokens[p] for p in held]
        ops = [
            fleet.promote(self.pks[p], t, s.batch, lease_ms)
            for p, t in zip(held, sent_tokens, strict=True)
        ]
        hints_before = [self.hints.get(p, 0) for p in held]
        sent = time.monotonic()
        expected = [self.due_at.get(p, sent) < sent for p in held]
        results = await self.transport.run_on(node, ops)
        now = time.monotonic()
        self.calls += len(ops)
        self._m_calls.inc(len(ops))
        failures: list[BaseException] = []
        redirected = 0
        for p, result, seen, token, expecting in zip(
            held, results, hints_before, sent_tokens, expected, strict=True
        ):
            if isinstance(result, FencedError):
                self.leases.fenced(p, str(result), token)
                if p not in tokens:
                    self._forget(p)
                # else: a stale token's refusal, the lease won again meanwhile; acquired()
                # already made it due.
                continue
            if isinstance(result, BaseException):
                self.errors += 1
                metrics.SCRIPT_ERRORS.labels(self.queue, "promote", type(result).__name__).inc()
                if faults.is_migration(result):
                    # The partition's slot is moving (or moved): the normal signal of a move,
                    # not an error.  The slot map is refreshed and the partition regrouped.
                    redirected += 1
                    log_redirect(
                        log,
                        result,
                        partition=keys.label_of_fleet_id(p),
                        loop=self.nodes.loop_name(node),
                    )
                else:
                    failures.append(result)
                if faults.is_redirect(result) or faults.is_transient(result):
                    self.nodes.topology_changed()
                self._schedule(p, now + ERROR_BACKOFF, now + ERROR_BACKOFF)
                continue
            if p not in tokens:
                self._forget(p)
                continue  # released meanwhile
            self.leases.extended(p, sent)
            moved = result.moved
            self._yield(p, result, expecting)
            self.promoted += moved
            self._m_promoted.inc(moved)
            self.by_partition[p] = self.by_partition.get(p, 0) + moved
            if moved:
                for callback in self.on_moved:
                    callback(p)
            self.rates.observe(p, moved, now)
            if moved >= s.batch:
                self.idle_streak[p] = 0
                self._schedule(p, now, now)  # more are due: go again at once
                continue
            if self.hints.get(p, 0) != seen:
                self.idle_streak[p] = 0
                self._due_in(p, 0.0, now)  # a hint came meanwhile: go again (within slack)
                continue
            wait = (
                math.inf
                if result.next_due_ms is None
                else max(0.0, (result.next_due_ms - result.now_ms) / 1000.0)
            )
            fallback = self._fallback(p, moved, wait, now)
            if wait <= fallback:
                self._due_in(p, wait, now)
            else:
                # Nothing due within the fallback: look again then (no slack on top), on the
                # process's grid (less the coalescing window the loop adds to its sleep), so
                # idle partitions' looks and the periodic loops wake the process together.
                at = self.supervisor.on_tick(now + fallback) - s.coalesce
                self._schedule(p, at, at)
        if failures and len(failures) + redirected == len(ops):
            # The whole primary failed: let the supervisor log it and back off this loop.
            raise failures[0]

    def _fallback(self, partition: int, moved: int, wait: float, now: float) -> float:
        """How long a partition may sleep without a hint: max_sleep, doubling each time in a
        row it is found with nothing moved and nothing due within max_sleep, until the doubled
        sleep reaches max_idle_sleep; from then on it is looked at only by the safety net
        (:attr:`net`: at most IDLE_PROMOTE_RATE such looks a second for the process).  Any
        promoted job or hint starts it over."""
        s = self.settings
        if moved or wait <= s.max_sleep:
            self.idle_streak[partition] = 0
            return s.max_sleep
        streak = self.idle_streak.get(partition, LONG_IDLE)
        self.idle_streak[partition] = streak + 1
        doubled = s.max_sleep * 2.0 ** min(streak, LONG_IDLE)
        if doubled < s.max_idle_sleep:
            return doubled
        return self.net.next_look(partition, now) - now
