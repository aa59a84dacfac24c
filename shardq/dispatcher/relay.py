"""Relay: carries workflow children's ends from the held partitions' outboxes to their batches.

A batch child's (or chain step's) end is written into its own partition's outbox by the
script that ends it (lua/includes/outbox.lua), since no script can reach the batch's slot.
This loop reads the outboxes of the partitions this dispatcher holds, reports each entry to
its batch (lua/batch-report-2.lua: idempotent, the child's bit in the batch's bitmap), does
what the reports call for (a callback, a chain's next step, a report to a parent batch:
:func:`shardq.plans.workflows.settle`, each idempotent) and only then deletes the entries.
A dispatcher killed at any point leaves the entries for the next holder of the partition, whose
resent reports change nothing: no end is lost or counted twice.

Woken at once by the outbox hint (message ``o`` on the partition's due-hint channel, published
with the entry) and by a won lease; every held partition's outbox is also read by a safety net
for a lost hint (shardq/runtime/pacing.py), every max(:data:`RECHECK`, held /
:data:`RECHECK_RATE`) seconds (at most 1.5x that after its last relay), and a round that left
entries (a fault) is tried again after :data:`ERROR_BACKOFF`.  A queue without workflows pays
that read only: one HSCAN of an empty hash per partition per period, at most about RECHECK_RATE
a second for the process whatever the partitions it holds, pipelined per node, and only the
partitions it finds entries in are relayed (one at a time, each its own round trips).

Where the batch's primary has a replica, an entry is deleted only once its batch's count was
confirmed by one (WAIT on the connection that wrote it), and callbacks are enqueued durably on
primaries that have one: so a failover of the batch's primary cannot lose a count whose
outbox entry is gone (docs/workflows.md says what each setting promises).  Per primary: one
left without a replica (right after a failover) waits for none, and the others' reports
still wait for theirs (:class:`~shardq.store.op.Waiting` ``per_node``).

The holder of the queue's first partition also sweeps the queue's batches every
:data:`SWEEP_EVERY` seconds (:func:`shardq.plans.workflows.sweep`): it does the fires of a
batch whose producer died between ending it (seal, cancel) and doing them, drops settled ids
from the unsettled set, and exports its size (``shardq_workflow_batches_open``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from shardq.config import ProducerSettings
from shardq.dispatcher.context import DispatcherContext
from shardq.dispatcher.leases import Leases
from shardq.metrics import registry as metrics
from shardq.plans import drive_async
from shardq.plans import workflows as workflow_plans
from shardq.runtime.duetimes import DueTimes
from shardq.runtime.pacing import SafetyNet
from shardq.runtime.waits import wait_event_until
from shardq.store import workflows as ops
from shardq.store.clock import REDIS_CLOCK
from shardq.store.meta import QueueCache
from shardq.store.op import Batch, Waiting
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

CALLBACK_LAG = Histogram(
    "shardq_workflow_callback_lag_seconds",
    "From a batch's end (Redis clock) to its callbacks enqueued by this process's relay or sweep.",
    ["queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
GIVEN_UP = Counter(
    "shardq_workflow_fires_given_up_total",
    "Fires this process gave up because their job is refused for good (the error is kept in "
    "the batch's record: `shardq batch get`).",
    ["queue"],
)
OPEN = Gauge(
    "shardq_workflow_batches_open",
    "Batches and chains (nested ones too) created and not yet settled (ended, and their "
    "callbacks enqueued), read by the dispatcher holding the queue's first partition.",
    ["queue"],
)

LOOP = "relay"
#: Seconds between reads of a held partition's outbox with no hint (a lost hint waits this
#: long), at least; and between looks at the slot map for replicas.
RECHECK = 30.0
#: Most such reads a second for the process: a partition's period grows with held / this.
RECHECK_RATE = 2.0
#: Most outboxes one safety-net pass reads.
CHECK_LIMIT = 1024
ONE_HEAP = ""
#: Partitions relayed at once.
CONCURRENCY = 16
#: How long one partition's round may retry through faults before it is left for the next.
WINDOW = 10.0
ERROR_BACKOFF = 1.0
#: Seconds between the sweep's rounds (each reads two pages of ids: see plans/workflows.py, sweep).
SWEEP_EVERY = 10.0


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
        # Partitions whose lease was won since the last pass: their outboxes are read first.
        self.won: set[int] = set()
        # The queue's first partition: its holder sweeps the batches.
        self.first = min(self.pks) if self.pks else None
        #: When each partition's outbox is next read without a hint (the safety net).
        self.next_check = DueTimes(lambda p: ONE_HEAP)
        self.net = SafetyNet(RECHECK_RATE, RECHECK, lambda: max(len(leases.tokens), leases.target))
        self.event = asyncio.Event()
        self.relayed = 0
        self.dropped = 0
        self.errors = 0
        self.swept = 0
        self.sweep_now = False
        self.cursor = (0, 0)
        self._exported_open = False
        self.transport = ctx.transport
        self._m_relayed = RELAYED.labels(ctx.queue, "relayed")
        self._m_dropped = RELAYED.labels(ctx.queue, "dropped")
        self._m_lag = LAG.labels(ctx.queue)
        self._m_callback_lag = CALLBACK_LAG.labels(ctx.queue)
        leases.when_acquired(self._acquired)

    def replicas(self) -> int:
        """Replicas a report waits for: one when any primary has one (per the client's slot
        map, read again every RECHECK and after a round a fault left unfinished), else none.
        Each node's WAIT is capped at the replicas that node has (:meth:`batches`): a WAIT for
        a replica that does not exist would only time out."""
        return min(1, self.transport.most_replicas())

    def batches(self, what: str) -> Callable[[Batch], Awaitable[Any]]:
        """The runner's sender for a plan, with every Waiting batch per node (see
        :meth:`replicas`; the plans are the producers', whose own durable writes are strict)."""
        send = self.runner.batches(what)

        def per_node(batch: Batch) -> Awaitable[Any]:
            if isinstance(batch, Waiting) and not batch.per_node:
                batch = dataclasses.replace(batch, per_node=True)
            return send(batch)

        return per_node

    def wake(self, partition: int) -> None:
        """An outbox hint came, or a lease was won: read the partition's outbox now."""
        self.wanted.add(partition)
        self.event.set()

    def _acquired(self, partition: int) -> None:
        """A lease was won: look at its outbox now (with the others won meanwhile, in one
        read per primary: a dispatcher starting on 16,384 partitions wins them all at once),
        and sweep the queue's batches now if it is the queue's first partition (the sweep is
        its holder's)."""
        if partition == self.first:
            self.sweep_now = True
        self.won.add(partition)
        self.event.set()

    def start(self) -> None:
        self.supervisor.forever(LOOP, self._loop, pace=RECHECK, wakes=(self.event,))

    async def _loop(self) -> None:
        stop = self.supervisor.stop_event(LOOP)
        state = self.supervisor.state(LOOP)
        next_refresh = time.monotonic() + RECHECK
        # At once, and whenever partition 0 is won (wake): its holder exports the
        # open-batches gauge from its first round.
        next_batches = time.monotonic()
        checks = self.next_check
        while not stop.is_set():
            state.progress()
            now = time.monotonic()
            held = self.leases.tokens
            check = []
            for p in checks.take(ONE_HEAP, now, CHECK_LIMIT):
                if p in held:
                    check.append(p)
                    checks.set(p, self.net.next_look(p, now))
                else:
                    checks.discard(p)  # released or lost since it was set
            if self.won:
                check += [p for p in self.won if p in held]
                self.won.clear()
            if check:
                self.wanted.update(await self._with_entries(check))
            if now >= next_refresh:
                next_refresh = self.supervisor.on_tick(now + RECHECK)  # on the process's grid
                # The replicas a report waits for come from the slot map, which nothing else
                # refreshes while no call fails: a replica that joined (or the old primary
                # back as one after a failover) is seen within RECHECK.
                with contextlib.suppress(Exception):
                    await self.transport.refresh()
            if self.sweep_now or now >= next_batches:
                self.sweep_now = False
                next_batches = self.supervisor.on_tick(now + SWEEP_EVERY)
                await self.sweep()
            held = self.leases.tokens
            todo = [p for p in self.wanted if p in held and p in self.pks]
            self.wanted.clear()
            if todo:
                await self.round(todo)
                now = time.monotonic()
                for p in todo:  # relayed now: the safety net starts over from here
                    if p not in self.wanted:
                        checks.set(p, self.net.next_look(p, now))
                state.ok()
                continue
            self.event.clear()
            state.ok()
            earliest = checks.earliest(ONE_HEAP)
            wake_at = min(next_refresh, next_batches)
            if earliest is not None:
                wake_at = min(wake_at, self.supervisor.on_tick(earliest))
            await wait_event_until(self.event, wake_at)

    async def sweep(self) -> bool:
        """One round of the batches' sweep, by the holder of the queue's first partition only
        (its loss of the lease hands the sweep over with the partition); whether it ran."""
        if self.first is None or self.first not in self.leases.tokens:
            if self._exported_open:  # the holder that took partition 0 exports it now
                OPEN.remove(self.queue)
                self._exported_open = False
            return False
        try:
            done = await drive_async(
                workflow_plans.sweep(
                    self.cache,
                    self.queue,
                    self.producer,
                    REDIS_CLOCK.now_ms(),
                    self.cursor,
                    self.replicas(),
                ),
                self.batches("sweeping the queue's batches"),
            )
        except Exception as exc:
            self.errors += 1
            metrics.SCRIPT_ERRORS.labels(self.queue, "relay", type(exc).__name__).inc()
            log.warning("batch sweep failed: %s: %s", type(exc).__name__, exc)
            return True
        self.cursor = done.cursor
        self.swept += done.fired
        OPEN.labels(self.queue).set(done.unsettled)
        self._exported_open = True
        if done.fired:
            log.warning(
                "relay sweep did the fires of %d batch(es) whose producer left them", done.fired
            )
        self._callbacks(done.callbacks_ended_ms)
        return True

    def _callbacks(self, ended: list[int]) -> None:
        if not ended:
            return
        now_ms = REDIS_CLOCK.now_ms()
        for ms in ended:
            if ms:
                self._m_callback_lag.observe(max(0.0, (now_ms - ms) / 1000.0))

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

        replicas = self.replicas()  # once a round: it reads the whole slot map

        async def one(p: int) -> None:
            async with gate:
                await self._partition(p, replicas)

        await asyncio.gather(*(one(p) for p in partitions))

    async def _partition(self, p: int, replicas: int) -> None:
        pk = self.pks[p]
        # One pass reads the outbox page by page (HSCAN), so entries a fault left in one page
        # never hold back those of the next; a pass that moved anything starts another.
        cursor = left = moved = 0
        while True:
            try:
                done = await drive_async(
                    workflow_plans.relay_partition(
                        self.cache, self.queue, pk, self.producer, replicas, cursor
                    ),
                    self.batches(f"relaying the outbox of partition {pk.label}"),
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
                    "relay dropped %d outbox entries of %s (no batch takes them, or no script "
                    "wrote them: their job has not ended)",
                    dropped,
                    pk.label,
                )
            for name in done.fires:
                FIRES.labels(self.queue, "step" if name.startswith("step:") else name).inc()
            self._callbacks(done.callbacks_ended_ms)
            if done.given_up:
                GIVEN_UP.labels(self.queue).inc(len(done.given_up))
                log.error(
                    "relay gave up fires of %s: %s (kept in the batch's record: shardq batch get)",
                    pk.label,
                    "; ".join(done.given_up),
                )
            cursor, left, moved = done.cursor, left + done.left, moved + relayed + dropped
            if cursor:
                continue
            if left:
                # Entries a fault left (a batch's primary down, a report not yet confirmed by
                # its replica): tried again after a pause, not only at the next hint.  The slot
                # map is read again first: a replica that died drops out of it once the cluster
                # marks it failed, and the relay then stops waiting for it (replicas()).
                with contextlib.suppress(Exception):
                    await self.transport.refresh()
                await asyncio.sleep(ERROR_BACKOFF)
                self.wanted.add(p)
                self.event.set()
                return
            if moved == 0:
                return
            left = moved = 0
