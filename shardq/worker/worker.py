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

Start-up and shutdown are the ones every role shares (:mod:`shardq.runtime.process`); the
worker adds its components, each built on one :class:`~shardq.worker.context.WorkerContext`.
Shutdown (SIGTERM, :meth:`Worker.stop`): hints and the fetch loops stop first (nothing new is
read), the recoverer and janitor next; running handlers get ``shutdown_grace`` to finish while
their acks are flushed and the heartbeat and membership loops keep them claimed; handlers still
running then are cancelled and left pending for another worker; last the heartbeat stops, the
consumer is retired where it holds nothing, and the worker leaves the fleet.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from shardq.config import WorkerSettings
from shardq.connection import AsyncRedis
from shardq.errors import ConfigError
from shardq.jobs import Job
from shardq.runtime import hints
from shardq.runtime.identity import member_id
from shardq.runtime.process import RoleContext, RoleProcess, Stopping
from shardq.store import delivery, keys
from shardq.tasks import Tasks
from shardq.worker.context import Handler, WorkerContext
from shardq.worker.executor import Executor
from shardq.worker.fetcher import Fetcher, read_loops
from shardq.worker.heartbeat import Heartbeat
from shardq.worker.inflight import InFlight, WorkerStats
from shardq.worker.janitor import PRUNE_EVERY, Janitor
from shardq.worker.pool import QueueChoice, SharedConcurrency, parse_queues
from shardq.worker.progress import PROGRESS_INTERVAL, ProgressReporter
from shardq.worker.recoverer import Recoverer
from shardq.worker.settler import Settler

# How often a worker re-reads its queue's rate limits: a limit set or removed applies this soon.
LIMITS_REFRESH = 2.0

H = TypeVar("H", bound=Handler)

#: A message on a partition's ready-hint channel that names a running job cancelled.
CANCEL_PREFIX = b"cancel:"

STOP_READING = ["hints", "fetcher:", "fetcher-topology", "recoverer", "janitor"]


def inline(fn: H) -> H:
    """Mark a sync handler to run inline on the worker's event loop (see Worker.register)."""
    fn.__shardq_inline__ = True  # type: ignore[attr-defined]
    return fn


class Worker(RoleProcess[WorkerSettings]):
    """Runs jobs of one queue, or of several.

    >>> worker = Worker(redis, "emails")
    >>> @worker.handler("send")
    ... async def send(job): ...
    >>> await worker.run()

    Several queues (``Worker(redis, ["emails", "reports:3"])``; ``strict=True`` for strict
    order): one worker of each runs in this process, on this one Redis client, one hint
    subscription per primary, one thread pool and one pool of ``concurrency`` deliveries shared
    by weight or in order (:mod:`shardq.worker.pool`); the handlers, stats and member id are
    this worker's, and each queue's metrics and health are its own (:attr:`queue_workers`).
    """

    role = "worker"

    def __init__(
        self,
        redis: AsyncRedis,
        queue: str | Sequence[str | QueueChoice],
        *,
        handlers: Mapping[str, Handler] | None = None,
        settings: WorkerSettings | None = None,
        partitions: Iterable[int] | None = None,
        name: str | None = None,
        instance: str | None = None,
        on_complete: Callable[[Job], None] | None = None,
        strict: bool = False,
    ) -> None:
        choices = parse_queues([queue] if isinstance(queue, str) else list(queue))
        settings = settings or WorkerSettings()
        if len(choices) > 1 and partitions is not None:
            raise ConfigError("pinned partitions are for a worker of one queue")
        super().__init__(
            redis,
            ",".join(c.name for c in choices),
            settings,
            name or member_id("worker", instance),
            partitions,
        )
        self.name = self.member
        self.handlers: dict[str, Handler] = {}
        #: Job type -> seconds one attempt may run, where a task declares it (else
        #: handler_timeout).
        self.timeouts: dict[str, float] = {}
        self.stats = WorkerStats()
        self.on_complete = on_complete
        self._inline: set[str] = set()
        self.context: WorkerContext | None = None
        self.fetcher: Fetcher | None = None
        self.recoverer: Recoverer | None = None
        #: Serving several queues: the shared pool, the shared hint subscription, and the
        #: worker of each queue (they share this one's handlers, stats and member id).
        self.pool: SharedConcurrency | None = None
        self.hub: hints.HintHub | None = None
        self.queues = [c.name for c in choices]
        self.queue_workers: dict[str, Worker] = {}
        if len(choices) > 1:
            self.pool = SharedConcurrency(settings.concurrency, choices, strict=strict)
            self.hub = hints.HintHub()
            for c in choices:
                child = Worker(redis, c.name, settings=settings, name=self.name)
                child.handlers, child.timeouts, child._inline = (
                    self.handlers,
                    self.timeouts,
                    self._inline,
                )
                child.stats, child.on_complete = self.stats, on_complete
                child.pool, child.hub = self.pool, self.hub
                child.transport, child.owns_transport = self.transport, False
                self.queue_workers[c.name] = child
        if isinstance(handlers, Tasks):
            self.register_tasks(handlers)
        else:
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

    def register_tasks(self, tasks: Tasks) -> None:
        """Run every declared task (:mod:`shardq.tasks`), each with its declared timeout."""
        for task in tasks.tasks():
            self.register(task.name, task.fn)
            if task.timeout is not None:
                self.timeouts[task.name] = task.timeout

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator form of :meth:`register`."""

        def deco(fn: H) -> H:
            self.register(job_type, fn)
            return fn

        return deco

    def stop(self) -> None:
        """Stop reading; running jobs get ``shutdown_grace`` seconds to finish."""
        super().stop()
        for child in self.queue_workers.values():
            child.stop()

    @property
    def inflight(self) -> int:
        if self.queue_workers:
            return sum(child.inflight for child in self.queue_workers.values())
        return self.context.inflight.count if self.context is not None else 0

    async def run(self) -> None:
        """Run until :meth:`stop` (or SIGTERM in the CLI), then shut down: for several queues,
        each queue's worker in its order, all at once; one that fails to start stops them all."""
        if not self.queue_workers:
            await super().run()
            return
        assert self.hub is not None and self.pool is not None
        hub, sup = self.hub, self.supervisor
        self.transport.on_refresh.append(hub.changed.set)  # regroup after a slot map change
        sup.forever(
            "hints",
            lambda: hub.listen(self.redis, sup, "hints", self.transport.refresh),
            pace=hints.PASS_WAIT,
            wakes=(hub.changed,),  # a stop ends the listeners at once
        )
        runs = [asyncio.ensure_future(child.run()) for child in self.queue_workers.values()]
        try:
            for finished in asyncio.as_completed(runs):
                try:
                    await finished
                except BaseException:
                    self.stop()  # one queue's worker failed: the process stops, all of it
                    raise
        finally:
            self.stop()
            await asyncio.gather(*runs, return_exceptions=True)
            await sup.stop()
            self.pool.close()
            await self.transport.aclose()

    @property
    def assigned(self) -> set[int]:
        """Partitions this worker reads eagerly (its share of the fleet)."""
        return set(self.fetcher.assigned) if self.fetcher is not None else set()

    @property
    def fleet_size(self) -> int:
        return self.fetcher.fleet_size if self.fetcher is not None else 0

    # running (RoleProcess.run: the start-up and shutdown both roles share) ------------------

    def membership_keys(self) -> tuple[str, str] | None:
        if self._pinned is not None:
            return None  # pinned: reads its partitions whoever else is live
        return keys.workers_key(self.queue), keys.workers_drain_key(self.queue)

    async def start_role(self, core: RoleContext[WorkerSettings]) -> Stopping:
        s = self.settings
        # Built in the order they need each other.  The fetch loops come first: the in-flight
        # table (room freed) and the settler (an ack to send) wake them.
        reads = read_loops(core)
        inflight = InFlight(s.concurrency, on_room=reads.wake_all)
        ctx = WorkerContext(
            **core.fields(),
            stats=self.stats,
            inflight=inflight,
            handlers=self.handlers,
            inline_types=self._inline,
            on_complete=self.on_complete,
            timeouts=self.timeouts,
        )
        settler = Settler(ctx, wake=reads.wake)
        reporter = ProgressReporter(ctx)
        executor = Executor(ctx, settler=settler, reporter=reporter)  # and its limiter
        fetcher = Fetcher(ctx, settler=settler, executor=executor, loops=reads)
        recoverer = Recoverer(ctx, executor=executor, fetcher=fetcher)
        heartbeat = Heartbeat(
            ctx, executor=executor, on_members=fetcher.assign, on_gone=recoverer.trigger
        )
        janitor = Janitor(ctx, fetcher=fetcher)
        limiter = executor.limiter
        self.context, self.fetcher, self.recoverer = ctx, fetcher, recoverer
        with contextlib.suppress(Exception):  # the limits loop retries it
            await limiter.refresh()  # limits apply from the first job fetched
        sup = self.supervisor
        if ctx.membership is not None:
            with contextlib.suppress(Exception):  # the membership loop retries it
                await heartbeat.members()
            sup.every("membership", s.heartbeat_interval, heartbeat.members)
        sup.every("heartbeat", s.heartbeat_interval, heartbeat.beat)
        fetcher.start()
        sup.forever("recoverer", recoverer.loop, pace=s.reclaim_interval, wakes=(recoverer.now,))
        sup.every("janitor", PRUNE_EVERY, janitor.round)
        sup.every("limits", LIMITS_REFRESH, limiter.refresh)
        sup.every("limit-holds", s.heartbeat_interval, limiter.renew)
        sup.every("progress", PROGRESS_INTERVAL, reporter.flush)

        def on_hint(partition: int, message: bytes | None) -> None:
            # The ready-hint channel also carries running cancels (lua/cancel-7.lua): any
            # role may publish there, so a touch reads whether the job is gone first.
            if message is not None and message.startswith(CANCEL_PREFIX):
                heartbeat.cancel_hint(partition, message[len(CANCEL_PREFIX) :])
            else:
                fetcher.hint(partition, message)

        ready = {ctx.pks[p].ready_hint: p for p in ctx.partitions}
        # Due hints too: an enqueue that moves a partition's head earlier says when, and the
        # assigned worker's read promotes it then (Fetcher.due_hint).
        due = {ctx.pks[p].due_hint: p for p in ctx.partitions}
        if self.pool is not None:
            self.pool.attach(self.queue, inflight, lambda: bool(fetcher.known_work))
        # A worker of several queues: one subscription for all of them (the parent listens);
        # this queue's channels stay routed through the drain (cancels still reach running
        # jobs).  A worker of one queue listens on a hub of its own.
        hub = self.hub or hints.HintHub()
        tokens = [hub.add(ready, on_hint), hub.add(due, fetcher.due_hint)]
        if self.hub is None:
            sup.forever(
                "hints",
                lambda: hub.listen(self.redis, sup, "hints", self.transport.refresh),
                pace=hints.PASS_WAIT,
            )

        async def drain() -> None:
            # The heartbeat, membership and limit-holds loops still run: running jobs stay
            # claimed, and their limit slots held, through the grace.
            await limiter.drain()
            await executor.drain(s.shutdown_grace, settler.flush)
            await self._finish_settling(settler)

        async def close() -> None:
            await heartbeat.close()
            await recoverer.calls.close()
            executor.close()
            for token in tokens:
                hub.remove(token)
            await self._retire(ctx)

        return Stopping(STOP_READING, drain, close, lambda: str(self.stats))

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
            self.log.warning("%d acks could not be written before exit: those jobs run again", left)
        for task in list(settler.tasks):
            task.cancel()
        await asyncio.gather(*settler.tasks, return_exceptions=True)

    async def _retire(self, ctx: WorkerContext) -> None:
        """Remove this worker's consumer from every group it holds nothing in."""
        ops = [delivery.retire(ctx.pks[p], self.name) for p in ctx.partitions]
        try:
            await self.transport.run_many(ops)
        except Exception as exc:
            self.log.warning("retiring consumer %s failed: %s", self.name, exc)
