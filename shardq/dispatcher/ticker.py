"""Ticker: fires the periodic schedules of the partitions this dispatcher holds.

One supervised loop per Redis primary (:class:`~shardq.runtime.pernode.PerPrimary`, as the
promoter), so a stalled primary delays only its own partitions' ticks.  Each pass reads, for
every held partition of its primary whose wake time has come, the schedules whose next tick is
at or before the Redis clock (lua/schedule-read-3.lua, one batched read), computes each one's
ticks, misfires and next tick in Python (:func:`shardq.schedules.firing`: calendar arithmetic
from the Redis time the read returned), and sends them to the fenced fire script
(lua/schedule-fire-7.lua) with the partition's lease token.  It then sleeps until the earliest
next tick of its partitions (each partition's next read at most ``max_sleep`` ahead while it
has schedules); a won lease and a due hint (an added schedule, an enqueue) wake it early.

The Prometheus counters are labelled by queue only: schedule names are unbounded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from prometheus_client import Counter

from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.errors import FencedError, InvalidPeriodicScheduleError
from shardq.metrics import registry as metrics
from shardq.runtime.duetimes import DueTimes
from shardq.runtime.pacing import SafetyNet
from shardq.runtime.pernode import IDLE_PASS, PerPrimary
from shardq.runtime.waits import wait_event
from shardq.schedules import Definition, firing
from shardq.store import schedules as ops

log = logging.getLogger("shardq.dispatcher")

FIRES = Counter(
    "shardq_schedule_fires_total",
    "Jobs enqueued for periodic schedule ticks by this process.",
    ["queue"],
)
MISFIRES = Counter(
    "shardq_schedule_misfires_total",
    "Periodic schedule ticks missed and not run (per the schedule's misfire policy).",
    ["queue"],
)

# Most due schedules read (and fired) per partition per call; more are read again at once.
READ_BATCH = 100
# After a failed call, or a pass that fired nothing it read, a partition waits this long.
ERROR_BACKOFF = 0.25
LOOP = "schedules"  # the loops are ``schedules:<primary>`` and ``schedules-topology``


# Seconds between looks at a partition that had no schedule (see Ticker._sleep_until), at
# least: a new schedule wakes its partition through the due hint schedule-put publishes, and
# every partition gets a hint after each resubscription, so this only bounds a lost hint.
EMPTY_RECHECK = 60.0
# Most such looks a second for the process (shardq/runtime/pacing.py): a partition without
# schedules is read every max(EMPTY_RECHECK, held / this) seconds (at most 1.5x that after its
# last read), so an idle dispatcher's schedule reads do not grow with the partitions it holds.
EMPTY_RECHECK_RATE = 1.0
# Most partitions one round reads (the rest go in the next round, at once).
ROUND_LIMIT = 1024


class Ticker:
    """Fires due schedules of held partitions; see the module docstring."""

    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        """It fires the schedules of the partitions ``leases`` holds, at once for each won."""
        self.supervisor = ctx.supervisor
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = pks = ctx.pks
        self.leases = leases
        self.settings = ctx.settings
        self.fired = 0
        self.misfired = 0
        self.calls = 0
        self._m_fires = FIRES.labels(ctx.queue)
        self._m_misfires = MISFIRES.labels(ctx.queue)
        #: The longest one pass of a loop sleeps (its partitions' own wake times come sooner).
        self.longest_sleep = max(ctx.settings.max_sleep, IDLE_PASS)
        self.nodes = PerPrimary(
            ctx.supervisor,
            ctx.transport,
            LOOP,
            list(pks),
            lambda p: pks[p].due,
            self.longest_sleep,
        )
        #: When each held partition's schedules are next read (held ones only).
        self.next_wake = DueTimes(self.nodes.node_of)
        self.net = SafetyNet(
            EMPTY_RECHECK_RATE,
            max(ctx.settings.max_sleep, EMPTY_RECHECK),
            lambda: max(len(leases.tokens), leases.target),
        )
        leases.when_acquired(self.wake)

    def wake(self, partition: int) -> None:
        """A lease was won or a hint came: look at the partition's schedules now."""
        if partition in self.leases.tokens:
            self.next_wake.set(partition, 0.0)
            self.nodes.wake(partition)

    def start(self) -> None:
        self.nodes.start(self._loop)

    async def _loop(self, node: str) -> None:
        name = self.nodes.loop_name(node)
        stop = self.supervisor.stop_event(name)
        state = self.supervisor.state(name)
        event = self.nodes.event(node)
        longest = self.longest_sleep
        due_times = self.next_wake
        due_times.rebuild()  # (re)started: partitions a failed round had taken are due again
        generation = self.nodes.generation
        while not stop.is_set():
            state.progress()
            if generation != self.nodes.generation:  # partitions moved between primaries
                generation = self.nodes.generation
                due_times.rebuild()
            now = time.monotonic()
            held = self.leases.tokens
            due = []
            for p in due_times.take(node, now, ROUND_LIMIT):
                if p in held:
                    due.append(p)
                else:
                    due_times.discard(p)  # released or lost since it was set
            if due:
                await self.round(due, {p: held[p] for p in due})
                state.ok()
                continue
            earliest = due_times.earliest(node)
            cap = self.supervisor.on_tick(now + longest)  # on the process's grid
            wake_at = cap if earliest is None else min(earliest, cap)
            event.clear()
            state.ok()
            # Until the earliest wake time (set for every partition read; a won lease or a hint
            # wakes the loop): an idle loop wakes every IDLE_PASS, not every max_sleep.
            await wait_event(event, max(0.0, wake_at - now))

    def _sleep_until(self, p: int, head_ms: int | None, now_ms: int, at: float) -> None:
        s = self.settings
        if head_ms is None:
            # No schedule in this partition (most partitions, most queues): a new one wakes it
            # through the due hint its put publishes; the slow recheck only covers a lost hint,
            # at a bounded rate for the process (self.net).  On the process's grid: it wakes
            # the process with the periodic loops.
            self.next_wake.set(p, self.supervisor.on_tick(self.net.next_look(p, at)))
        else:
            self.next_wake.set(p, at + min(max(0.0, (head_ms - now_ms) / 1000.0), s.max_sleep))

    def _error(self, p: int, op: str, exc: BaseException) -> None:
        metrics.SCRIPT_ERRORS.labels(self.queue, op, type(exc).__name__).inc()
        self.next_wake.set(p, time.monotonic() + ERROR_BACKOFF)

    async def round(self, partitions: Sequence[int], tokens: dict[int, str]) -> None:
        """Read and fire the due schedules of ``partitions`` once."""
        reads = await self.transport.run_many(
            [ops.read(self.pks[p], "due", "", READ_BATCH) for p in partitions]
        )
        self.calls += len(partitions)
        at = time.monotonic()
        failures: list[BaseException] = []
        found: list[tuple[int, ops.ReadResult]] = []
        for p, got in zip(partitions, reads, strict=True):
            if isinstance(got, BaseException):
                failures.append(got)
                self._error(p, "schedule-read", got)
            elif not got.schedules:
                self._sleep_until(p, got.head_ms, got.now_ms, at)
            else:
                found.append((p, got))
        # Tick arithmetic off the event loop: after a long outage a cron schedule may count
        # thousands of missed ticks, and leases must keep being renewed meanwhile.
        calls = await asyncio.to_thread(self._fire_calls, found) if found else []
        if calls:
            fire_ops = [ops.fire(self.pks[p], tokens[p], chunk) for p, _, chunk in calls]
            results = await self.transport.run_many(fire_ops)
            self.calls += len(fire_ops)
            at = time.monotonic()
            for (p, got, chunk), result in zip(calls, results, strict=True):
                if isinstance(result, FencedError):
                    self.leases.fenced(p, str(result), tokens[p])
                    if p not in self.leases.tokens:
                        self.next_wake.discard(p)
                    # else: a stale token's refusal, the lease won again meanwhile; wake()
                    # already made it due.
                    continue
                if isinstance(result, BaseException):
                    failures.append(result)
                    self._error(p, "schedule-fire", result)
                    continue
                self._settled(p, got, chunk, result, at)
        if failures and not calls and len(failures) == len(partitions):
            raise failures[0]  # every read failed: let the supervisor log it and back off

    def _settled(
        self,
        p: int,
        got: ops.ReadResult,
        chunk: list[ops.Fire],
        result: ops.FireResult,
        at: float,
    ) -> None:
        created = sum(c for _, c in result.statuses)
        fired = [f for f, (status, _) in zip(chunk, result.statuses, strict=True) if status == 1]
        misfires = sum(f.misfires for f in fired)
        self.fired += created
        self.misfired += misfires
        if created:
            self._m_fires.inc(created)
        if misfires:
            self._m_misfires.inc(misfires)
        if len(got.schedules) >= READ_BATCH:
            self.next_wake.set(p, at)  # more may be due: read again at once
        elif not fired:
            # Every schedule read changed meanwhile (or a clock went back): read again soon,
            # not in a tight loop.
            self.next_wake.set(p, at + ERROR_BACKOFF)
        else:
            self._sleep_until(p, result.head_ms, result.now_ms, at)

    def _fire_calls(
        self, found: list[tuple[int, ops.ReadResult]]
    ) -> list[tuple[int, ops.ReadResult, list[ops.Fire]]]:
        calls = []
        for p, got in found:
            fires = [self._fire(row, got.now_ms) for row in got.schedules]
            calls += [(p, got, chunk) for chunk in _chunks(fires)]
        return calls

    def _fire(self, row: ops.StoredSchedule, now_ms: int) -> ops.Fire:
        expected = row.next_ms if row.next_ms is not None else 0
        if row.definition is None:
            # A next tick without a definition: the script drops it.
            return ops.Fire(row.name, expected, "", -1, 0, b"", ())
        sha = ops.definition_sha(row.definition)
        try:
            d = Definition.from_json(row.name, row.definition)
            fired = firing(d, expected, now_ms)
        except (InvalidPeriodicScheduleError, ValueError, OverflowError) as exc:
            # Unreadable (written by hand or by a newer shardq): stop it rather than read it
            # again on every pass; `shardq schedule add` with the same name repairs it.
            log.error(
                "schedule %r of %s cannot be fired and is stopped: %s", row.name, self.queue, exc
            )
            return ops.Fire(row.name, expected, sha, -1, 0, b"", ())
        body = d.body.encode()
        return ops.Fire(row.name, expected, sha, fired.next_ms, fired.misfires, body, fired.ticks)


def _chunks(fires: list[ops.Fire]) -> list[list[ops.Fire]]:
    """Split one partition's fires into calls of at most FIRE_TICKS ticks and FIRE_GROUPS
    schedules each."""
    out: list[list[ops.Fire]] = [[]]
    ticks = 0
    for f in fires:
        if out[-1] and (ticks + len(f.ticks) > ops.FIRE_TICKS or len(out[-1]) >= ops.FIRE_GROUPS):
            out.append([])
            ticks = 0
        out[-1].append(f)
        ticks += len(f.ticks)
    return out
