"""Relay: carries workflow children's ends from the held partitions' outboxes to their batches.

A batch child's (or chain step's) end is written into its own partition's outbox by the
script that ends it (lua/includes/outbox.lua), since no script can reach the batch's slot.
This loop reads the outboxes of the partitions this dispatcher holds, reports each entry to
its batch (lua/batch-report-2.lua: idempotent, the child's bit in the batch's bitmap), does
what the reports call for (a callback, a chain's next step, a report to a parent batch:
:func:`shardq.plans.workflows.do_fires`, each idempotent) and only then deletes the entries.
A dispatcher killed at any point leaves the entries for the next holder of the partition, whose
resent reports change nothing: no end is lost or counted twice.

Woken at once by the outbox hint (message ``o`` on the partition's due-hint channel, published
with the entry) and by a won lease; every held partition is also read every
:data:`RECHECK` seconds, which bounds a lost hint.  A queue without workflows pays that read
only: one HSCAN of an empty hash per partition per RECHECK, pipelined per node, and only the
partitions it finds entries in are relayed (one at a time, each its own round trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import Counter, Histogram

from shardq.config import ProducerSettings
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.metrics import registry as metrics
from shardq.plans import drive_async
from shardq.plans import workflows as plans
from shardq.store import workflows as ops
from shardq.store.producer import REDIS_CLOCK, QueueCache
from shardq.store.retry import AsyncRunner

log = logging.getLogger("shardq.dispatcher")

RELAYED = Counter(
    "shardq_workflow_reports_total",
    "Workflow children's ends relayed from outboxes to their batches by this process.",
    ["queue", "result"],
)

FIRES = Counter(
    "shardq_workflow_fires_total",
    "What batches' ends called for, done by this process's relay: callbacks enqueued "
    "(success, complete, failure), chain steps enqueued (step), parent batches told (parent).",
    ["queue", "fire"],
)
LAG = Histogram(
    "shardq_workflow_relay_lag_seconds",
    "From a workflow child's end (Redis clock) to its report counted in its batch.",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)

LOOP = "relay"
#: Seconds between reads of every held partition's outbox (a lost hint waits this long).
RECHECK = 30.0
#: Partitions relayed at once.
CONCURRENCY = 16
#: How long one partition's round may retry through faults before it is left for the next.
WINDOW = 10.0
ERROR_BACKOFF = 1.0


class Relay:
    """Relays the outboxes of held partitions; see the module docstring."""

    def __init__(self, ctx: DispatcherContext, *, leases: Leases) -> None:
        self.supervisor = ctx.supervisor
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.leases = leases
        self.transport = ctx.transport
        self.runner = AsyncRunner(ctx.transport, WINDOW)
        self.cache = QueueCache()
        self.cache.keep(ctx.meta)
        self.producer = ProducerSettings()
        self.wanted: set[int] = set()
        self.event = asyncio.Event()
        self.relayed = 0
        self.dropped = 0
        self.errors = 0
        self._m_relayed = RELAYED.labels(ctx.queue, "relayed")
        self._m_dropped = RELAYED.labels(ctx.queue, "dropped")
        self._m_lag = LAG.labels(ctx.queue)
        leases.when_acquired(self.wake)

    def wake(self, partition: int) -> None:
        """An outbox hint came, or a lease was won: read the partition's outbox now."""
        self.wanted.add(partition)
        self.event.set()

    def start(self) -> None:
        self.supervisor.forever(LOOP, self._loop, pace=RECHECK, wakes=(self.event,))

    async def _loop(self) -> None:
        stop = self.supervisor.stop_event(LOOP)
        state = self.supervisor.state(LOOP)
        next_sweep = time.monotonic() + RECHECK
        while not stop.is_set():
            state.progress()
            now = time.monotonic()
            if now >= next_sweep:
                self.wanted.update(await self._with_entries(list(self.leases.tokens)))
                next_sweep = now + RECHECK
            held = self.leases.tokens
            todo = [p for p in self.wanted if p in held and p in self.pks]
            self.wanted.clear()
            if todo:
                await self.round(todo)
                state.ok()
                continue
            self.event.clear()
            state.ok()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), max(0.0, next_sweep - now))

    async def _with_entries(self, partitions: list[int]) -> list[int]:
        """The partitions of ``partitions`` whose outbox holds anything, read in one batch per
        primary (the relay's own first read of each, HSCAN from the start): the sweep relays
        only those.  Relaying every held partition went one partition at a time, each with
        its own round trip, 2 a second at P = 64 on an idle queue, the dispatcher's most
        frequent calls there.  A read that failed counts as holding entries (its relay
        retries it)."""
        wanted = [p for p in partitions if p in self.pks]
        try:
            results = await self.transport.run_many([ops.outbox_read(self.pks[p]) for p in wanted])
        except Exception:
            return wanted  # each partition's relay meets the fault and says so
        return [
            p
            for p, r in zip(wanted, results, strict=True)
            if isinstance(r, BaseException) or r[0] or r[1]
        ]

    async def round(self, partitions: list[int]) -> None:
        """Relay the outboxes of ``partitions`` (each until it is empty or fails)."""
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(p: int) -> None:
            async with gate:
                await self._partition(p)

        await asyncio.gather(*(one(p) for p in partitions))

    async def _partition(self, p: int) -> None:
        pk = self.pks[p]
        while True:
            try:
                done = await drive_async(
                    plans.relay_partition(self.cache, self.queue, pk, self.producer),
                    self.runner.batches(f"relaying the outbox of partition {pk.label}"),
                )
            except Exception as exc:
                self.errors += 1
                metrics.SCRIPT_ERRORS.labels(self.queue, "relay", type(exc).__name__).inc()
                log.warning(
                    "relay of partition %s failed: %s: %s", pk.label, type(exc).__name__, exc
                )
                await asyncio.sleep(ERROR_BACKOFF)
                self.wanted.add(p)
                return
            relayed, dropped = done.relayed, done.dropped
            self.relayed += relayed
            self.dropped += dropped
            if relayed:
                self._m_relayed.inc(relayed)
                now_ms = REDIS_CLOCK.now_ms()
                for ended in done.ended_ms:
                    self._m_lag.observe(max(0.0, (now_ms - ended) / 1000.0))
            if dropped:
                self._m_dropped.inc(dropped)
                log.warning(
                    "relay dropped %d outbox entries of %s (no batch takes them)", dropped, pk.label
                )
            for name in done.fires:
                FIRES.labels(self.queue, "step" if name.startswith("step:") else name).inc()
            if relayed + dropped == 0:
                return
