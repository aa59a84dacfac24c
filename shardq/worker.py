"""The worker: runs handlers for ready jobs and settles each one exactly as it ended.

It reads every partition's ready stream through the consumer group (a batch per partition per
call, all partitions of a node in one round trip), runs handlers (async ones as tasks, sync ones
in a thread pool), acknowledges successes in batches, retries failures with backoff by moving
the job back to the due set atomically, and dead-letters jobs that used up their attempts or
raised PermanentError.  A heartbeat keeps its running deliveries claimed, so the visibility
timeout can be short; deliveries of a worker that died are reclaimed by the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from redis.exceptions import RedisError, ResponseError

from shardq import hints, keys, metrics, scripts
from shardq.config import WorkerSettings
from shardq.connection import AsyncRedis
from shardq.dispatcher import process_id, queue_partitions
from shardq.errors import (
    HandlerTimeoutError,
    PermanentError,
    RetryAfter,
    UnknownJobTypeError,
    UnknownQueueError,
)
from shardq.hints import stop_tasks
from shardq.jobs import DEFAULT_BACKOFF, Backoff, Job, decode_body
from shardq.logs import log_event

log = logging.getLogger("shardq.worker")

Handler = Callable[[Job], Any]
H = TypeVar("H", bound=Handler)
ERROR_BACKOFF = 0.25
MIN_FETCH = 32
# How often (seconds) a worker looks for consumers of crashed workers to remove.
PRUNE_EVERY = 60.0


def inline(fn: H) -> H:
    """Mark a sync handler to run inline on the worker's event loop (see Worker.register)."""
    fn.__shardq_inline__ = True  # type: ignore[attr-defined]
    return fn


@dataclass(slots=True)
class WorkerStats:
    """Counters of this process."""

    started: int = 0
    completed: int = 0
    retried: int = 0
    dead: int = 0
    reclaimed: int = 0
    lost_deliveries: int = 0
    errors: int = 0


@dataclass(slots=True)
class _Delivery:
    partition: int
    entry_id: bytes
    job: Job
    started: float = 0.0
    task: asyncio.Task[None] | None = None
    timed_out: bool = False


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
        on_complete: Callable[[Job], None] | None = None,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.settings = settings or WorkerSettings()
        self.name = name or process_id("worker")
        self.handlers: dict[str, Handler] = {}
        self.stats = WorkerStats()
        self.on_complete = on_complete
        self._wanted = None if partitions is None else sorted(set(partitions))
        self._pk: list[keys.PartitionKeys] = []
        self._partitions: list[int] = []
        self._poll_at: dict[int, float] = {}
        self._inflight: dict[int, dict[bytes, _Delivery]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._acks: dict[int, list[tuple[bytes, str]]] = {}
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._executor: ThreadPoolExecutor | None = None
        self._rotate = 0
        self._assigned: set[int] = set()
        self._fleet_size = 1
        self._delete_acked = "1"
        self._last_prune = 0.0
        self._async_handlers: dict[Handler, bool] = {}
        self._inline: set[str] = set()
        self._m_lateness = metrics.JOB_LATENESS.labels(queue)
        self._m_duration: dict[str, Any] = {}
        self._m_jobs = {
            outcome: metrics.WORKER_JOBS.labels(queue, outcome)
            for outcome in ("completed", "retried", "dead")
        }
        self._m_inflight = metrics.WORKER_INFLIGHT.labels(queue)
        for job_type, fn in (handlers or {}).items():
            self.register(job_type, fn)
        # Hints seen per partition: a hint that lands while a fetch is in flight must not be
        # overwritten by that fetch's "nothing more here" result.
        self._hints: dict[int, int] = {}

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

    def _is_async(self, handler: Handler) -> bool:
        known = self._async_handlers.get(handler)
        if known is None:
            known = self._async_handlers[handler] = inspect.iscoroutinefunction(handler)
        return known

    def stop(self) -> None:
        """Stop reading; running jobs get ``shutdown_grace`` seconds to finish."""
        self._stop.set()
        self._wake.set()

    @property
    def inflight(self) -> int:
        return sum(len(d) for d in self._inflight.values())

    # main loop -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop`, then drain in-flight jobs within the grace period."""
        total = await queue_partitions(self.redis, self.queue)
        retention = await self.redis.hget(  # type: ignore[misc]
            keys.queue_meta_key(self.queue), "ack_retention_ms"
        )
        self._delete_acked = "1" if int(retention or 0) == 0 else "0"
        self._pk = keys.all_partition_keys(self.queue, total)
        self._partitions = self._wanted if self._wanted is not None else list(range(total))
        if any(not 0 <= p < total for p in self._partitions):
            raise UnknownQueueError(f"queue {self.queue!r} has partitions 0..{total - 1}")
        self._poll_at = dict.fromkeys(self._partitions, 0.0)
        self._inflight = {p: {} for p in self._partitions}
        self._assigned = set(self._partitions)
        if self._wanted is None:
            with contextlib.suppress(RedisError):
                await self._membership()
        channels = {self._pk[p].ready_hint: p for p in self._partitions}
        background = [
            asyncio.create_task(hints.listen(self.redis, channels, self._hint, self._stop)),
            asyncio.create_task(self._every(self.settings.heartbeat_interval, self._heartbeat)),
            asyncio.create_task(self._every(self.settings.reclaim_interval, self._reclaim)),
        ]
        log.info("worker %s started on %s (%d partitions)", self.name, self.queue, total)
        try:
            await self._fetch_loop()
            await self._drain()
        finally:
            await stop_tasks(background)
            await self._retire()
            if self._wanted is None:
                with contextlib.suppress(RedisError):
                    await self._membership(leaving=True)
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            log.info("worker %s stopped (%s)", self.name, self.stats)

    async def _membership(self, leaving: bool = False) -> None:
        """Heartbeat into the worker set and recompute which partitions are ours to read.

        Worker i of N (sorted ids) is assigned the partitions p with p mod N == i and reads
        them eagerly (hints, idle_poll).  Every other partition it sweeps rarely, every
        sweep_interval x (N - 1), so the fleet looks at each partition about once per
        sweep_interval whatever N is: a partition whose worker died, or a backlog bigger than
        its worker can take, is still read (a sweep that finds a full batch keeps reading).
        """
        reply = await scripts.arun(
            self.redis,
            scripts.script("members"),
            [keys.workers_key(self.queue), keys.workers_key(self.queue) + ":drain"],
            [self.name, round(self.settings.membership_timeout * 1000), "1" if leaving else "0"],
        )
        if leaving:
            return
        live = sorted(m.decode() if isinstance(m, bytes) else str(m) for m in reply[1])
        if self.name not in live:
            live.append(self.name)
            live.sort()
        index, n = live.index(self.name), len(live)
        assigned = {p for p in self._partitions if p % n == index}
        newly = assigned - self._assigned
        self._assigned, self._fleet_size = assigned, n
        for p in newly:
            self._poll_at[p] = 0.0

    def _idle_interval(self, partition: int) -> float:
        if partition in self._assigned:
            return self.settings.idle_poll
        return self.settings.sweep_interval * max(1, self._fleet_size - 1)

    def _hint(self, partition: int) -> None:
        if partition not in self._assigned:
            return
        self._poll_at[partition] = 0.0
        self._hints[partition] = self._hints.get(partition, 0) + 1
        self._wake.set()

    async def _fetch_loop(self) -> None:
        s = self.settings
        while not self._stop.is_set():
            # Finished jobs waiting for their ack no longer take room: their acks travel with
            # the next fetch, in the same round trip.
            room = s.concurrency - self.inflight + sum(len(a) for a in self._acks.values())
            now = time.monotonic()
            due = [p for p in self._partitions if self._poll_at[p] <= now]
            if room <= 0 or not due:
                await self._flush_acks()
                wake_at = min(self._poll_at.values(), default=now + s.idle_poll)
                timeout = s.idle_poll if room <= 0 else max(0.0, wake_at - now)
                self._wake.clear()
                if self._acks:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), min(timeout, s.idle_poll))
                continue
            # Share the free room among due partitions, rotating who goes first for fairness.
            self._rotate = (self._rotate + 1) % len(due)
            due = due[self._rotate :] + due[: self._rotate]
            # Fewer, fuller reads beat many thin ones: at least MIN_FETCH entries per partition
            # read while there is room for them.
            count = max(1, min(s.fetch_batch, max(room // len(due), MIN_FETCH), room))
            due = due[: max(1, room // count)]
            await self._fetch(due, count)

    async def _fetch(self, partitions: list[int], count: int) -> None:
        calls = [
            (
                scripts.script("fetch"),
                [pk.ready, pk.jobs, pk.dead, pk.errors, pk.stats],
                [keys.WORKER_GROUP, self.name, count],
            )
            for pk in (self._pk[p] for p in partitions)
        ]
        hints_before = [self._hints.get(p, 0) for p in partitions]
        ack_parts, acked, ack_calls = self._take_acks()
        try:
            replies = await scripts.arun_many(self.redis, ack_calls + calls)
        except RedisError as exc:
            replies = [exc] * (len(ack_calls) + len(calls))
        self._acks_settled(ack_parts, acked, replies[: len(ack_calls)])
        replies = replies[len(ack_calls) :]
        now = time.monotonic()
        for p, reply, seen in zip(partitions, replies, hints_before, strict=True):
            if isinstance(reply, Exception):
                await self._fetch_failed(p, reply)
                self._poll_at[p] = now + ERROR_BACKOFF
                continue
            n = (len(reply) - 1) // 5
            more = n >= count or self._hints.get(p, 0) != seen
            self._poll_at[p] = now if more else now + self._idle_interval(p)
            redis_now = int(reply[0])
            for i in range(n):
                eid, job_id, due, attempt, body = reply[1 + 5 * i : 6 + 5 * i]
                self._start(p, eid, job_id.decode(), due, int(attempt), body, redis_now, now, 1)

    async def _fetch_failed(self, partition: int, exc: Exception) -> None:
        self.stats.errors += 1
        if isinstance(exc, ResponseError) and "NOGROUP" in str(exc):
            # The stream or group vanished (FLUSHALL, manual delete): recreate it.
            try:
                await self.redis.xgroup_create(
                    self._pk[partition].ready, keys.WORKER_GROUP, id="0", mkstream=True
                )
            except ResponseError as again:
                if "BUSYGROUP" not in str(again):
                    log.warning("recreating group on partition %d failed: %s", partition, again)
            return
        log.warning("fetch on partition %d failed: %s", partition, exc)

    # running jobs --------------------------------------------------------------------------

    def _start(
        self,
        partition: int,
        eid: bytes,
        job_id: str,
        due: bytes,
        attempt: int,
        body_raw: bytes,
        redis_now: int,
        monotonic_now: float,
        deliveries: int,
    ) -> None:
        try:
            body = decode_body(body_raw)
        except ValueError as exc:
            job = Job(job_id, self.queue, partition, "?", None, attempt, 1, None)
            delivery = _Delivery(partition, eid, job)
            self._inflight[partition][eid] = delivery
            self._spawn(self._settle_failure(delivery, PermanentError(f"undecodable body: {exc}")))
            return
        job = Job(
            id=job_id,
            queue=self.queue,
            partition=partition,
            type=body["t"],
            payload=body.get("p"),
            attempt=attempt,
            max_attempts=body.get("m") or self.settings.default_max_attempts,
            due_ms=int(due) if due else None,
            idempotency_key=body.get("k"),
            headers=body.get("h") or {},
            deliveries=deliveries,
            backoff=Backoff.decode(body["b"]) if "b" in body else None,
            fetched_redis_ms=redis_now,
            fetched_monotonic=monotonic_now,
        )
        delivery = _Delivery(partition, eid, job, monotonic_now)
        self._inflight[partition][eid] = delivery
        self.stats.started += 1
        if job.type in self._inline:
            self._run_inline(delivery, self.handlers[job.type])
        else:
            delivery.task = self._spawn(self._execute(delivery))

    def _run_inline(self, delivery: _Delivery, handler: Handler) -> None:
        """An inline handler: called right here on the event loop; only failures need a task."""
        job = delivery.job
        started = time.monotonic()
        if job.due_ms is not None:
            self._m_lateness.observe(max(0.0, (job.redis_now_ms(started) - job.due_ms) / 1000.0))
        try:
            handler(job)
        except Exception as exc:
            self._duration(job.type).observe(time.monotonic() - started)
            self._spawn(self._settle_failure(delivery, exc))
            return
        self._duration(job.type).observe(time.monotonic() - started)
        self._acks.setdefault(delivery.partition, []).append((delivery.entry_id, job.id))
        if self.on_complete is not None:
            self.on_complete(job)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _execute(self, delivery: _Delivery) -> None:
        job = delivery.job
        handler = self.handlers.get(job.type)
        started = time.monotonic()
        if job.due_ms is not None:
            self._m_lateness.observe(max(0.0, (job.redis_now_ms(started) - job.due_ms) / 1000.0))
        try:
            if handler is None:
                raise UnknownJobTypeError(
                    f"no handler for job type {job.type!r} on this worker: register one with "
                    f"worker.register({job.type!r}, fn) (known: {sorted(self.handlers)})"
                )
            await self._call(handler, job)
        except asyncio.CancelledError:
            if delivery.timed_out:
                # The watchdog stopped a handler that ran over handler_timeout: retry it.
                await self._settle_failure(
                    delivery,
                    HandlerTimeoutError(
                        f"handler for {job.type!r} ran over handler_timeout "
                        f"({self.settings.handler_timeout} s): make it faster, split the job, "
                        "or raise handler_timeout"
                    ),
                )
                return
            # Shutdown grace ran out: leave the delivery pending; another worker reclaims it.
            self._inflight[delivery.partition].pop(delivery.entry_id, None)
            raise
        except Exception as exc:
            self._duration(job.type).observe(time.monotonic() - started)
            await self._settle_failure(delivery, exc)
            return
        self._duration(job.type).observe(time.monotonic() - started)
        self._acks.setdefault(delivery.partition, []).append((delivery.entry_id, job.id))
        if self.on_complete is not None:
            self.on_complete(job)
        self._wake.set()

    def _duration(self, job_type: str) -> Any:
        child = self._m_duration.get(job_type)
        if child is None:
            child = self._m_duration[job_type] = metrics.JOB_DURATION.labels(self.queue, job_type)
        return child

    def _watchdog(self) -> None:
        """Cancel handlers running longer than handler_timeout (checked with the heartbeat)."""
        timeout = self.settings.handler_timeout
        if timeout is None:
            return
        deadline = time.monotonic() - timeout
        for deliveries in self._inflight.values():
            for d in deliveries.values():
                if d.started < deadline and not d.timed_out and d.task is not None:
                    d.timed_out = True
                    d.task.cancel()

    async def _call(self, handler: Handler, job: Job) -> None:
        if self._is_async(handler):
            await handler(job)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                self.settings.concurrency, thread_name_prefix="shardq-job"
            )
        # A sync handler that overruns handler_timeout keeps its thread until it returns
        # (threads cannot be killed); the job itself is settled as failed at the timeout.
        result = await asyncio.get_running_loop().run_in_executor(self._executor, handler, job)
        if inspect.isawaitable(result):
            await result

    async def _settle_failure(self, delivery: _Delivery, exc: BaseException) -> None:
        job = delivery.job
        backoff = job.backoff or DEFAULT_BACKOFF
        permanent = isinstance(exc, PermanentError)
        if permanent or job.attempt >= job.max_attempts:
            delay_ms = -1
        elif isinstance(exc, RetryAfter):
            delay_ms = max(0, round(exc.delay * 1000))
        else:
            delay_ms = max(0, round(backoff.delay(job.attempt) * 1000))
        text = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, PermanentError | RetryAfter):
            text += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:])
        text = text.encode()[: self.settings.max_error_bytes].decode(errors="ignore")
        pk = self._pk[delivery.partition]
        call = (
            scripts.script("fail"),
            [pk.ready, pk.jobs, pk.due, pk.dead, pk.errors, pk.stats],
            [keys.WORKER_GROUP, delivery.entry_id, job.id, delay_ms, text, pk.due_hint],
        )
        for attempt in range(5):
            try:
                await scripts.arun(self.redis, *call)
                break
            except RedisError as err:
                log.warning("settling failed job %s failed (%s); retrying", job.id, err)
                await asyncio.sleep(ERROR_BACKOFF * (attempt + 1))
        self._inflight[delivery.partition].pop(delivery.entry_id, None)
        dead = delay_ms < 0
        if dead:
            self.stats.dead += 1
        else:
            self.stats.retried += 1
        self._m_jobs["dead" if dead else "retried"].inc()
        log_event(
            log,
            "job.dead" if dead else "job.retry",
            job_id=job.id,
            queue=self.queue,
            partition=delivery.partition,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            error_type=type(exc).__name__,
            error=str(exc)[:200],
            retry_in_ms=None if dead else delay_ms,
            trace_id=job.headers.get("traceparent"),
        )
        self._wake.set()

    def _take_acks(
        self,
    ) -> tuple[list[int], dict[int, list[tuple[bytes, str]]], list[scripts.Call]]:
        """The ack calls for every finished job (one per partition), taken off the buffer."""
        if not self._acks:
            return [], {}, []
        pending, self._acks = self._acks, {}
        parts = list(pending)
        calls: list[scripts.Call] = []
        for p in parts:
            pk = self._pk[p]
            argv: list[Any] = [keys.WORKER_GROUP, self._delete_acked]
            for eid, job_id in pending[p]:
                argv += (eid, job_id)
            calls.append((scripts.script("ack"), [pk.ready, pk.jobs, pk.errors, pk.stats], argv))
        return parts, pending, calls

    def _acks_settled(
        self, parts: list[int], pending: dict[int, list[tuple[bytes, str]]], replies: list[Any]
    ) -> None:
        for p, reply in zip(parts, replies, strict=True):
            if isinstance(reply, Exception):
                # Keep them: the jobs ran, and the ack is retried on the next round.
                log.warning("ack on partition %d failed: %s", p, reply)
                self._acks.setdefault(p, []).extend(pending[p])
                continue
            for eid, _ in pending[p]:
                self._inflight[p].pop(eid, None)
            self.stats.completed += len(pending[p])
            self._m_jobs["completed"].inc(len(pending[p]))

    async def _flush_acks(self) -> None:
        parts, pending, calls = self._take_acks()
        if not calls:
            return
        try:
            replies = await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            replies = [exc] * len(calls)
        self._acks_settled(parts, pending, replies)

    async def _drain(self) -> None:
        """Give running jobs the grace period, settle what finished, abandon the rest."""
        deadline = time.monotonic() + self.settings.shutdown_grace
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(list(self._tasks), timeout=min(0.1, deadline - time.monotonic()))
            await self._flush_acks()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for _ in range(20):
            await self._flush_acks()
            if not self._acks:
                break
            await asyncio.sleep(ERROR_BACKOFF)

    # upkeep --------------------------------------------------------------------------------

    async def _every(self, interval: float, fn: Callable[[], Awaitable[None]]) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                await fn()
            except RedisError as exc:
                log.warning("%s failed: %s", fn.__name__, exc)

    async def _heartbeat(self) -> None:
        """Reset the idle time of every delivery this worker is running."""
        self._watchdog()
        self._m_inflight.set(self.inflight)
        if self._wanted is None:
            await self._membership()
        parts = [p for p, d in self._inflight.items() if d]
        calls = [
            (
                scripts.script("touch"),
                [self._pk[p].ready],
                [keys.WORKER_GROUP, self.name, *self._inflight[p].keys()],
            )
            for p in parts
        ]
        for p, reply in zip(parts, await scripts.arun_many(self.redis, calls), strict=True):
            if isinstance(reply, list) and reply:
                self.stats.lost_deliveries += len(reply)
                metrics.WORKER_LOST.labels(self.queue).inc(len(reply))
                log.warning(
                    "partition %d: %d deliveries were reclaimed by another worker while running "
                    "(paused past visibility_timeout?); they may run twice",
                    p,
                    len(reply),
                )

    async def _reclaim(self) -> None:
        """Take over deliveries idle past the visibility timeout."""
        s = self.settings
        if time.monotonic() - self._last_prune >= PRUNE_EVERY:
            self._last_prune = time.monotonic()
            await self._prune_consumers()
        room = s.concurrency - self.inflight
        if room <= 0:
            return
        count = max(1, min(s.fetch_batch, room))
        mine = sorted(self._assigned)  # each partition is reclaimed by its assigned worker
        calls = [
            (
                scripts.script("reclaim"),
                [pk.ready, pk.jobs, pk.dead, pk.errors, pk.stats],
                [
                    keys.WORKER_GROUP,
                    self.name,
                    round(s.visibility_timeout * 1000),
                    count,
                    s.max_deliveries,
                ],
            )
            for pk in (self._pk[p] for p in mine)
        ]
        replies = await scripts.arun_many(self.redis, calls)
        now = time.monotonic()
        for p, reply in zip(mine, replies, strict=True):
            if isinstance(reply, Exception):
                continue
            n = (len(reply) - 1) // 6
            for i in range(n):
                eid, job_id, due, attempt, body, deliveries = reply[1 + 6 * i : 7 + 6 * i]
                self.stats.reclaimed += 1
                metrics.WORKER_RECLAIMED.labels(self.queue).inc()
                self._start(
                    p,
                    eid,
                    job_id.decode(),
                    due,
                    int(attempt),
                    body,
                    int(reply[0]),
                    now,
                    int(deliveries),
                )

    async def _prune_consumers(self) -> None:
        """Remove consumers of crashed workers (no pending entry, idle for long) from the
        groups of this worker's assigned partitions."""
        idle_ms = round(self.settings.prune_consumers_after * 1000)
        calls = [
            (scripts.script("prune-consumers"), [self._pk[p].ready], [keys.WORKER_GROUP, idle_ms])
            for p in sorted(self._assigned)
        ]
        removed = sum(
            int(r) for r in await scripts.arun_many(self.redis, calls) if isinstance(r, int)
        )
        if removed:
            log.info("removed %d consumer(s) of crashed workers from %s", removed, self.queue)

    async def _retire(self) -> None:
        """Remove this worker's consumer from every group it holds nothing in."""
        calls = [
            (scripts.script("retire"), [self._pk[p].ready], [keys.WORKER_GROUP, self.name])
            for p in self._partitions
        ]
        try:
            await scripts.arun_many(self.redis, calls)
        except RedisError as exc:
            log.warning("retiring consumer %s failed: %s", self.name, exc)
