"""The worker: runs handlers for ready jobs and settles each one exactly as it ended.

A small coordinator over components with one concern each, every background loop under one
:class:`~shardq.runtime.supervisor.Supervisor`:

- ``fetcher:<primary>`` (:mod:`.fetcher`): reads ready jobs, one loop per Redis primary, with
  the acks of finished jobs in the same round trip;
- :mod:`.executor`: runs handlers (async as tasks, sync in threads, ``@inline`` on the loop);
- :mod:`.settler`: acks in batches; failures back to due with backoff, or dead;
- ``heartbeat`` (:mod:`.heartbeat`): membership, keeps running deliveries claimed, watchdog;
- ``recoverer`` (:mod:`.recoverer`): takes over deliveries of workers that are gone;
- ``janitor`` (:mod:`.janitor`): removes consumers of crashed workers;
- ``hints``: ready wake-ups over sharded pub/sub.

Shutdown (SIGTERM, :meth:`Worker.stop`): hints and the fetch loops stop first (nothing new is
read), the recoverer and janitor next; running handlers get ``shutdown_grace`` to finish while
their acks are flushed and the heartbeat keeps them claimed; handlers still running then are
cancelled and left pending for another worker; last the heartbeat stops, the consumer is retired
where it holds nothing, and the worker leaves the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from shardq.config import WorkerSettings
from shardq.connection import AsyncRedis
from shardq.errors import UnknownQueueError
from shardq.jobs import Job
from shardq.logs import log_context
from shardq.runtime import health, hints, redis_config
from shardq.runtime.identity import member_id
from shardq.runtime.membership import Membership
from shardq.runtime.startup import queue_meta
from shardq.runtime.supervisor import Supervisor
from shardq.store import delivery, keys
from shardq.store.transport import AsyncTransport
from shardq.worker.executor import Executor
from shardq.worker.fetcher import Fetcher
from shardq.worker.heartbeat import Heartbeat
from shardq.worker.inflight import InFlight, WorkerStats
from shardq.worker.janitor import PRUNE_EVERY, Janitor
from shardq.worker.limiter import Limiter
from shardq.worker.recoverer import Recoverer
from shardq.worker.settler import Settler

# How often a worker re-reads its queue's rate limits: a limit set or removed applies this soon.
LIMITS_REFRESH = 2.0

log = logging.getLogger("shardq.worker")

Handler = Callable[[Job], Any]
H = TypeVar("H", bound=Handler)

STOP_READING = ["hints", "fetcher:", "fetcher-topology", "recoverer", "janitor"]


def inline(fn: H) -> H:
    """Mark a sync handler to run inline on the worker's event loop (see Worker.register)."""
    fn.__shardq_inline__ = True  # type: ignore[attr-defined]
    return fn


class Worker:
    """Runs jobs of one queue.

    >>> worker = Worker(redis, "emails")
    >>> @worker.handler("send")
    ... async def send(job): ...
    >>> await worker.run()
    """

    def __init__(
        self,
        redis: AsyncRedis,
        queue: str,
        *,
        handlers: dict[str, Handler] | None = None,
        settings: WorkerSettings | None = None,
        partitions: Iterable[int] | None = None,
        name: str | None = None,
        instance: str | None = None,
        on_complete: Callable[[Job], None] | None = None,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings or WorkerSettings()
        self.name = name or member_id("worker", instance)
        self.handlers: dict[str, Handler] = {}
        self.stats = WorkerStats()
        self.on_complete = on_complete
        self._wanted = None if partitions is None else sorted(set(partitions))
        self._inline: set[str] = set()
        self._stop = asyncio.Event()
        self.transport = AsyncTransport(redis)
        self.supervisor = Supervisor("worker", queue)
        self.inflight_table = InFlight(self.settings.concurrency)
        self.fetcher: Fetcher | None = None
        self.membership: Membership | None = None
        self.recoverer: Recoverer | None = None
        self.started = asyncio.Event()
        for job_type, fn in (handlers or {}).items():
            self.register(job_type, fn)

    # registration --------------------------------------------------------------------------

    def register(self, job_type: str, handler: Handler, *, inline: bool | None = None) -> None:
        """Run ``handler(job)`` for jobs of ``job_type``; sync or async.

        Async handlers run as tasks on the worker's event loop; sync handlers in a thread pool.
        ``inline=True`` (or a handler decorated with :func:`inline`) runs a sync handler
        directly on the event loop, with no thread hop and no task: for quick, non-blocking
        handlers only (it blocks every other job while it runs, and handler_timeout cannot stop
        it).
        """
        self.handlers[job_type] = handler
        if inline is None:
            inline = bool(getattr(handler, "__shardq_inline__", False))
        if inline:
            if inspect.iscoroutinefunction(handler):
                raise TypeError(f"{job_type!r}: inline handlers are plain functions, not async")
            self._inline.add(job_type)
        else:
            self._inline.discard(job_type)

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator form of :meth:`register`."""

        def deco(fn: H) -> H:
            self.register(job_type, fn)
            return fn

        return deco

    def stop(self) -> None:
        """Stop reading; running jobs get ``shutdown_grace`` seconds to finish."""
        self._stop.set()

    @property
    def inflight(self) -> int:
        return self.inflight_table.count

    @property
    def assigned(self) -> set[int]:
        """Partitions this worker reads eagerly (its share of the fleet)."""
        return set(self.fetcher.assigned) if self.fetcher is not None else set()

    @property
    def fleet_size(self) -> int:
        return self.fetcher.fleet_size if self.fetcher is not None else 0

    def health(self) -> health.Status:
        ready = self.started.is_set() and not self.supervisor.failing()
        sup = self.supervisor
        return health.Status("worker", self.queue, sup.problems(), ready, sup.stuck())

    # running -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop`, then drain in-flight jobs within the grace period."""
        health.register(self.health)
        try:
            # Every line this worker's loops write names its queue and worker.
            with log_context(queue=self.queue, worker=self.name):
                await self._run()
        finally:
            health.unregister(self.health)
            await self.transport.aclose()

    async def _run(self) -> None:
        meta = await queue_meta(self.transport, self.queue, self._stop, log)
        if meta is None:
            return
        s = self.settings
        watch = redis_config.ConfigWatch(
            self.transport,
            "worker",
            self.queue,
            allow_eviction=s.allow_evicting_redis,
            require_appendonly=s.require_appendonly,
        )
        await redis_config.check_at_start(watch)
        pks = keys.all_partition_keys(self.queue, meta.partitions)
        partitions = self._wanted if self._wanted is not None else list(range(meta.partitions))
        if any(not 0 <= p < meta.partitions for p in partitions):
            raise UnknownQueueError(f"queue {self.queue!r} has partitions 0..{meta.partitions - 1}")
        pinned = self._wanted is not None
        membership = (
            None
            if pinned
            else Membership(
                self.transport,
                keys.workers_key(self.queue),
                keys.workers_drain_key(self.queue),
                self.name,
                s.membership_timeout,
            )
        )
        inflight = self.inflight_table
        fetcher: Fetcher | None = None

        def wake(p: int) -> None:
            if fetcher is not None:
                fetcher.wake(p)

        settler = Settler(
            self.transport,
            self.queue,
            pks,
            inflight,
            s,
            self.stats,
            wake,
            self.handlers,
        )
        executor = Executor(
            self.queue,
            s,
            inflight,
            settler,
            self.stats,
            self.handlers,
            self._inline,
            self.on_complete,
        )
        limiter = Limiter(
            self.transport, self.queue, pks, inflight, s, self.stats, executor.run_now
        )
        executor.limiter = limiter
        with contextlib.suppress(Exception):  # the limits loop retries it
            await limiter.refresh()  # limits apply from the first job fetched
        fetcher = Fetcher(
            self.supervisor,
            self.transport,
            self.queue,
            pks,
            partitions,
            self.name,
            s,
            inflight,
            settler,
            executor,
            self.stats,
        )
        self.fetcher = fetcher
        recoverer = Recoverer(
            self.supervisor,
            self.transport,
            self.queue,
            pks,
            self.name,
            s,
            membership,
            lambda: fetcher.assigned,
            inflight,
            executor,
            self.stats,
        )
        heartbeat = Heartbeat(
            self.transport,
            self.queue,
            pks,
            self.name,
            membership,
            inflight,
            executor,
            self.stats,
            lambda live: fetcher.assign(live, pinned),
            recoverer.trigger,
            wait=s.heartbeat_interval / 2,
        )
        janitor = Janitor(self.transport, self.queue, pks, s, lambda: fetcher.assigned)
        self.membership, self.recoverer = membership, recoverer
        if membership is not None:
            with contextlib.suppress(Exception):  # the membership loop retries it
                await heartbeat.members()
        sup = self.supervisor
        channels = {pks[p].ready_hint: p for p in partitions}
        if membership is not None:
            sup.every("membership", s.heartbeat_interval, heartbeat.members)
        sup.every("heartbeat", s.heartbeat_interval, heartbeat.beat)
        fetcher.start()
        sup.forever("recoverer", recoverer.loop, pace=s.reclaim_interval)
        sup.every("janitor", PRUNE_EVERY, janitor.round)
        sup.every("limits", LIMITS_REFRESH, limiter.refresh)
        sup.every("limit-holds", s.heartbeat_interval, limiter.renew)
        sup.every("redis-config", s.redis_check_interval, watch.round)
        sup.forever(
            "hints",
            lambda: hints.listen(
                self.redis, channels, fetcher.hint, sup, "hints", self.transport.refresh
            ),
            pace=hints.PASS_WAIT,
        )
        self.started.set()
        log.info("worker %s started on %s (%d partitions)", self.name, self.queue, len(pks))
        try:
            await self._stop.wait()
        finally:
            await sup.stop(STOP_READING)  # heartbeat still runs: running jobs stay claimed
            await limiter.drain()
            await executor.drain(s.shutdown_grace, settler.flush)
            await self._finish_settling(settler)
            await sup.stop()
            await heartbeat.calls.close()
            await recoverer.calls.close()
            executor.close()
            await self._retire(pks, partitions)
            if membership is not None:
                with contextlib.suppress(Exception):
                    await membership.leave()
            log.info("worker %s stopped (%s)", self.name, self.stats)

    async def _finish_settling(self, settler: Settler) -> None:
        """Write the outcomes that are still in flight (acks, failure settles), briefly."""
        for _ in range(20):
            with contextlib.suppress(Exception):
                await settler.flush()
            if not settler.acks and not settler.tasks:
                return
            if settler.tasks:
                await asyncio.wait(list(settler.tasks), timeout=0.25)
            else:
                await asyncio.sleep(0.25)
        left = settler.abandon_acks()
        if left:
            log.warning("%d acks could not be written before exit: those jobs run again", left)
        for task in list(settler.tasks):
            task.cancel()
        await asyncio.gather(*settler.tasks, return_exceptions=True)

    async def _retire(self, pks: list[keys.PartitionKeys], partitions: list[int]) -> None:
        """Remove this worker's consumer from every group it holds nothing in."""
        try:
            await self.transport.run_many([delivery.retire(pks[p], self.name) for p in partitions])
        except Exception as exc:
            log.warning("retiring consumer %s failed: %s", self.name, exc)
