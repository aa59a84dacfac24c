"""Limiter: holds fetched jobs that are under a rate limit until the limit gives them a start.

Jobs of types and keys without a limit pass straight through (:meth:`Limiter.holds` is a dict
lookup).  Limited jobs handed over in one event-loop turn are gated together: one limit-take
call per limit for all of them, then each runs now or is deferred (back to its partition's due
set until its reserved start, its attempt given back), one defer call per partition.  A call
that fails is resent through faults for ``settle_window``; after that the delivery is given up
(it leaves the in-flight table and another worker reclaims it after the visibility timeout,
when the limit is asked again), so nothing here can run a job over its limit.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from shardq import metrics
from shardq.config import WorkerSettings
from shardq.limits import LimitTable, RateLimit
from shardq.logs import log_event
from shardq.runtime.supervisor import backoff_delay
from shardq.store import faults, keys
from shardq.store import limits as store_limits
from shardq.store.op import Op
from shardq.store.transport import AsyncTransport
from shardq.worker.inflight import Delivery, InFlight, WorkerStats

log = logging.getLogger("shardq.worker")

MAX_TAKE = 1000  # jobs per limit-take call (the script's bound)


class Limiter:
    """The queue's rate limits, applied to this worker's deliveries before they run."""

    def __init__(
        self,
        transport: AsyncTransport,
        queue: str,
        pks: list[keys.PartitionKeys],
        inflight: InFlight,
        settings: WorkerSettings,
        stats: WorkerStats,
        run: Callable[[Delivery], None],
    ) -> None:
        self.transport = transport
        self.queue = queue
        self.pks = pks
        self.inflight = inflight
        self.settings = settings
        self.stats = stats
        self.run = run
        self.table = LimitTable()
        self._held: list[tuple[Delivery, list[RateLimit]]] = []
        self._flush: asyncio.Handle | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self._bad: set[str] = set()

    # the limits ----------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Re-read the queue's limits (a loop of the worker's supervisor calls this)."""
        raw = await self.transport.client.hgetall(keys.limits_key(self.queue))
        found: list[RateLimit] = []
        for name, value in raw.items():
            text = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            try:
                found.append(RateLimit.from_stored(text, value))
            except ValueError as exc:
                if text not in self._bad:  # once per damaged field, not every refresh
                    self._bad.add(text)
                    log.error("limit %s of queue %s is ignored: %s", text, self.queue, exc)
        self.table = LimitTable(found)

    # gating --------------------------------------------------------------------------------

    def holds(self, d: Delivery) -> bool:
        """Whether ``d`` is under a limit: then it is gated (run or deferred) soon, by this."""
        if not self.table or d.reserved:
            return False
        limits = self.table.matching(d.job.type, d.job.limit_key)
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

    async def _gate(self, held: list[tuple[Delivery, list[RateLimit]]]) -> None:
        by_limit: dict[str, tuple[RateLimit, list[int]]] = {}
        for i, (_, limits) in enumerate(held):
            for limit in limits:
                by_limit.setdefault(limit.name, (limit, []))[1].append(i)
        start = [0] * len(held)
        failed: set[int] = set()
        for limit, members in by_limit.values():
            for lo in range(0, len(members), MAX_TAKE):
                part = members[lo : lo + MAX_TAKE]
                try:
                    starts = await self._resend(store_limits.take(self.queue, limit, len(part)))
                except Exception as exc:
                    failed.update(part)
                    self._give_up([held[i][0] for i in part], exc)
                    continue
                for i, t in zip(part, starts.times, strict=True):
                    start[i] = max(start[i], t)
                    if t:
                        metrics.JOBS_DEFERRED.labels(self.queue, limit.name).inc()
        deferred: dict[int, list[tuple[Delivery, int]]] = {}
        for i, (d, _) in enumerate(held):
            if i in failed:
                continue
            if start[i] == 0:
                self.run(d)
            else:
                deferred.setdefault(d.partition, []).append((d, start[i]))
        await asyncio.gather(*(self._defer(p, items) for p, items in deferred.items()))

    async def _defer(self, partition: int, items: list[tuple[Delivery, int]]) -> None:
        op = store_limits.defer(
            self.pks[partition], [(d.entry_id, d.raw_id, at) for d, at in items]
        )
        try:
            await self._resend(op)
        except Exception as exc:
            self._give_up([d for d, _ in items], exc)
            return
        for d, _ in items:
            self.inflight.remove(partition, d.entry_id)
        self.stats.deferred += len(items)

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
                await asyncio.sleep(backoff_delay(attempt, random.Random()))

    def _give_up(self, ds: list[Delivery], exc: BaseException) -> None:
        """Neither run nor deferred: leave them pending; reclaim asks the limit again."""
        for d in ds:
            self.inflight.remove(d.partition, d.entry_id)
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
        """Shutdown: let gates in progress finish (each is bounded by settle_window)."""
        if self._flush is not None:
            self._flush.cancel()
            self._start_gate()
        if self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)
