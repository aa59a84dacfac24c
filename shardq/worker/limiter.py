"""Limiter: holds fetched jobs that are under a limit (rate or concurrency) until the limit lets
them run.

Jobs of types and keys without a limit pass straight through (:meth:`Limiter.holds` is a dict
lookup).  Limited jobs handed over in one event-loop turn are gated together, one call per
limit: rate limits first (limit-take: a start time per job), then, for the jobs whose start is
now, concurrency limits (limit-acquire: a running slot per job).  A job that must wait goes back
to its partition's due set (defer, one call per partition, its attempt given back): until its
reserved start, or, refused a slot, for about one handler run per round of slots ahead of it.
Slots go back when the handler ends (limit-release, batched) and are renewed by the heartbeat;
a dead worker's expire after one visibility timeout.  A call that fails is resent through
faults for ``settle_window``; after that the delivery is given up (another worker reclaims it
after the visibility timeout and asks the limits again), so a fault never runs a job over its
limit.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from shardq import backoff
from shardq.limits import Limit, LimitTable
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.store import faults, queues
from shardq.store import limits as store_limits
from shardq.store.op import Op
from shardq.worker.context import WorkerContext
from shardq.worker.inflight import Delivery

log = logging.getLogger("shardq.worker")

MAX_TAKE = 1000  # jobs per limit-take/acquire/release call (the scripts' bound)
# A job refused a running slot asks again after about one handler run per round of slots
# ahead of it: this long until this worker has seen the limit's jobs run, and within these.
DEFAULT_RUN_MS = 1000.0
MIN_RETRY_MS = 50
MAX_RETRY_MS = 60_000


def _chunks(members: list[int]) -> list[list[int]]:
    return [members[lo : lo + MAX_TAKE] for lo in range(0, len(members), MAX_TAKE)]


class Limiter:
    """The queue's rate limits, applied to this worker's deliveries before they run."""

    def __init__(self, ctx: WorkerContext, *, run: Callable[[Delivery], None]) -> None:
        """``run(delivery)``: start a job's handler once its limits let it (the executor's
        ``run_now``; the executor makes its limiter)."""
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        self.inflight = ctx.inflight
        self.settings = ctx.settings
        self.stats = ctx.stats
        self.run = run
        self.table = LimitTable()
        self._held: list[tuple[Delivery, list[Limit]]] = []
        self._flush: asyncio.Handle | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self._bad: set[str] = set()
        # Concurrency: a hold lasts one visibility timeout unless renewed (heartbeat), so a
        # dead worker's slots come back within the same bound as its deliveries.
        self.hold_ms = round(ctx.settings.visibility_timeout * 1000)
        self._typical_ms: dict[str, float] = {}
        self._releases: dict[str, tuple[Limit, list[bytes]]] = {}
        self._release_flush: asyncio.Handle | None = None

    # the limits ----------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Re-read the queue's limits (a loop of the worker's supervisor calls this)."""
        raw = await self.transport.run(queues.limits_fields(self.queue))
        found: list[Limit] = []
        for text, value in raw.items():
            try:
                found.append(Limit.from_stored(text, value))
            except ValueError as exc:
                if text not in self._bad:  # once per damaged field, not every refresh
                    self._bad.add(text)
                    log.error("limit %s of queue %s is ignored: %s", text, self.queue, exc)
        self.table = LimitTable(found)

    # gating --------------------------------------------------------------------------------

    def holds(self, d: Delivery) -> bool:
        """Whether ``d`` is under a limit: then it is gated (run or deferred) soon, by this."""
        if not self.table:
            return False
        limits = self.table.matching(d.job.type, d.job.limit_key, d.job.tenant)
        if d.reserved:  # its start was reserved when it was deferred: only slots are asked
            limits = [x for x in limits if x.concurrency is not None]
        if not limits:
            return False
        self._held.append((d, limits))
        if self._flush is None:
            # Everything held in this turn of the loop goes in one gate: one call per limit.
            self._flush = asyncio.get_running_loop().call_soon(self._start_gate)
        return True

    def _start_gate(self) -> None:
        self._flush = None
        held, self._held = self._held, []
        task = asyncio.get_running_loop().create_task(self._gate(held))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _gate(self, held: list[tuple[Delivery, list[Limit]]]) -> None:
        """Rate limits first (a start time per job), then concurrency limits (a running slot
        per job and limit) for the jobs whose start is now; run those that got everything."""
        failed: set[int] = set()
        start = [0] * len(held)
        by_rate = self._group(held, lambda d, x: x.rate is not None and not d.reserved)
        for limit, members in by_rate:
            for part in _chunks(members):
                try:
                    starts = await self._resend(store_limits.take(self.queue, limit, len(part)))
                except Exception as exc:
                    self._give_up([held[i][0] for i in part if i not in failed], exc)
                    failed.update(part)
                    continue
                for i, t in zip(part, starts.times, strict=True):
                    start[i] = max(start[i], t)
                    if t:
                        metrics.JOBS_DEFERRED.labels(self.queue, self.table.label(limit)).inc()
        deferred: dict[int, list[tuple[Delivery, int]]] = {}
        now_ok = [i for i in range(len(held)) if i not in failed and start[i] == 0]
        for i in range(len(held)):
            if i not in failed and start[i] > 0:
                d = held[i][0]
                deferred.setdefault(d.partition, []).append((d, start[i]))
        # Concurrency: a slot of every concurrency limit of the job, or it waits in due.
        waiting = set(range(len(held))) - set(now_ok)
        by_slots = self._group(held, lambda d, x: x.concurrency is not None, skip=waiting)
        granted: dict[int, list[Limit]] = {}
        refused: dict[int, tuple[Limit, int, int]] = {}  # job -> (limit, its place, now ms)
        for limit, members in by_slots:
            place = 0
            for part in _chunks(members):
                ids = [held[i][0].raw_id for i in part]
                try:
                    got = await self._resend(
                        store_limits.acquire(self.queue, limit, ids, self.hold_ms)
                    )
                except Exception as exc:
                    self._give_up([held[i][0] for i in part if i not in failed], exc)
                    failed.update(part)
                    continue
                for i, ok in zip(part, got.held, strict=True):
                    if ok:
                        granted.setdefault(i, []).append(limit)
                    else:
                        refused.setdefault(i, (limit, place, got.now_ms))
                        place += 1
                        metrics.JOBS_DEFERRED.labels(self.queue, self.table.label(limit)).inc()
        to_release: list[Delivery] = []
        for i in now_ok:
            d = held[i][0]
            d.slots = granted.get(i, [])
            if i in failed or i in refused:
                if d.slots:
                    to_release.append(d)
                if i in refused:
                    limit, place, now_ms = refused[i]
                    deferred.setdefault(d.partition, []).append(
                        (d, now_ms + self._retry_ms(limit, place))
                    )
                continue
            self.run(d)
        for d in to_release:
            self.finished(d)  # slots of the job's other limits, taken for nothing
        await asyncio.gather(*(self._defer(p, items) for p, items in deferred.items()))

    def _group(
        self,
        held: list[tuple[Delivery, list[Limit]]],
        wanted: Callable[[Delivery, Limit], bool],
        skip: set[int] | frozenset[int] = frozenset(),
    ) -> list[tuple[Limit, list[int]]]:
        by_name: dict[str, tuple[Limit, list[int]]] = {}
        for i, (d, limits) in enumerate(held):
            if i in skip:
                continue
            for limit in limits:
                if wanted(d, limit):
                    by_name.setdefault(limit.name, (limit, []))[1].append(i)
        return list(by_name.values())

    def _retry_ms(self, limit: Limit, place: int) -> int:
        """When a job refused a running slot asks again: after about one handler run (this
        worker's running average for the limit) per full round of slots ahead of it, with
        jitter so the refused do not all come back at once."""
        assert limit.concurrency is not None
        typical = self._typical_ms.get(limit.name, DEFAULT_RUN_MS)
        wait = typical * (1 + place // limit.concurrency) * random.uniform(1.0, 1.25)
        return round(min(MAX_RETRY_MS, max(MIN_RETRY_MS, wait)))

    # running slots -------------------------------------------------------------------------

    def finished(self, d: Delivery) -> None:
        """The handler ended (the executor says so) or never started: give back its running
        slots, batched."""
        ran_ms = (time.monotonic() - d.started) * 1000.0
        for limit in d.slots:
            typical = self._typical_ms.get(limit.name, ran_ms)
            self._typical_ms[limit.name] = 0.8 * typical + 0.2 * ran_ms
            self._releases.setdefault(limit.name, (limit, []))[1].append(d.raw_id)
        d.slots = []
        if self._release_flush is None and self._releases:
            loop = asyncio.get_running_loop()
            self._release_flush = loop.call_soon(self._start_release)

    def _start_release(self) -> None:
        self._release_flush = None
        batch, self._releases = self._releases, {}
        task = asyncio.get_running_loop().create_task(self._release(batch))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _release(self, batch: dict[str, tuple[Limit, list[bytes]]]) -> None:
        for limit, ids in batch.values():
            for lo in range(0, len(ids), MAX_TAKE):
                try:
                    await self._resend(
                        store_limits.release(self.queue, limit, ids[lo : lo + MAX_TAKE])
                    )
                except Exception as exc:  # the holds expire by themselves after hold_ms
                    log.warning("releasing %s slots failed: %s", limit.name, exc)

    async def renew(self) -> None:
        """Heartbeat: extend the holds of this worker's running limited jobs (a loop of the
        worker's supervisor calls this every heartbeat interval)."""
        by_name: dict[str, tuple[Limit, list[bytes]]] = {}
        for d in self.inflight.all():
            if d.finished:
                continue
            for limit in d.slots:
                by_name.setdefault(limit.name, (limit, []))[1].append(d.raw_id)
        for limit, ids in by_name.values():
            for lo in range(0, len(ids), MAX_TAKE):
                await self.transport.run(
                    store_limits.acquire(self.queue, limit, ids[lo : lo + MAX_TAKE], self.hold_ms)
                )

    async def _defer(self, partition: int, items: list[tuple[Delivery, int]]) -> None:
        for lo in range(0, len(items), store_limits.MAX_DEFER):
            part = items[lo : lo + store_limits.MAX_DEFER]
            op = store_limits.defer(
                self.pks[partition], [(d.entry_id, d.raw_id, at) for d, at in part]
            )
            try:
                await self._resend(op)
            except Exception as exc:
                self._give_up([d for d, _ in part], exc)
                continue
            for d, _ in part:
                self.inflight.remove(partition, d.entry_id)
            self.stats.deferred += len(part)

    async def _resend(self, op: Op[Any]) -> Any:
        deadline = time.monotonic() + self.settings.settle_window
        attempt = 0
        while True:
            try:
                return await self.transport.run(op)
            except Exception as exc:
                attempt += 1
                metrics.SCRIPT_ERRORS.labels(self.queue, op.name, type(exc).__name__).inc()
                if not faults.is_transient(exc) or time.monotonic() >= deadline:
                    raise
                if faults.is_redirect(exc):
                    await self.transport.refresh()
                await asyncio.sleep(backoff.delay(attempt, random.Random()))

    def _give_up(self, ds: list[Delivery], exc: BaseException) -> None:
        """Neither run nor deferred: leave them pending; reclaim asks the limit again."""
        for d in ds:
            self.inflight.remove(d.partition, d.entry_id)
            self.inflight.left_pending(d.partition)
        self.stats.abandoned += len(ds)
        log_event(
            log,
            "limit.gate_failed",
            logging.ERROR,
            queue=self.queue,
            jobs=len(ds),
            error=f"{type(exc).__name__}: {exc}"[:300],
            hint="left pending: another worker reclaims them after the visibility timeout",
        )

    async def drain(self) -> None:
        """Shutdown: let gates and releases in progress finish (each bounded by
        settle_window)."""
        if self._flush is not None:
            self._flush.cancel()
            self._start_gate()
        if self._release_flush is not None:
            self._release_flush.cancel()
            self._start_release()
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
