"""Executor: turns a delivery into a Job and runs its handler.

Async handlers run as tasks on the event loop, sync ones in a thread pool, and handlers marked
``@inline`` right on the loop with no task at all (for quick, non-blocking work).  A watchdog
(run with the heartbeat) cancels handlers past ``handler_timeout``; a sync handler's job fails
at its timeout to the moment, on a timer of its own.  Whatever happens, the
delivery goes to the settler: success to be acknowledged, anything raised to be retried or
dead-lettered.  A delivery whose stored body cannot be read is dead-lettered as such, never
allowed to stop the worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from shardq import tracing
from shardq.errors import (
    DeadlineExceededError,
    HandlerTimeoutError,
    JobCancelledError,
    PermanentError,
    UnknownJobTypeError,
)
from shardq.jobs import Job
from shardq.jobs.body import decode_body, stored_options
from shardq.logs import log_event
from shardq.metrics import registry as metrics
from shardq.store import results
from shardq.store.delivery import BAD_ATTEMPT, Delivered
from shardq.worker.context import Handler, WorkerContext
from shardq.worker.inflight import Delivery
from shardq.worker.limiter import Limiter
from shardq.worker.progress import ProgressReporter
from shardq.worker.settler import Settler

log = logging.getLogger("shardq.worker")


class _Resume:
    """Awaits the rest of a coroutine that was started by hand and suspended on ``first``:
    every later step is passed through to the task awaiting this, and every exception the task
    throws in (cancellation) is thrown into the coroutine."""

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, None, Any]:
        coro, step = self.coro, self.first
        self.first = None
        while True:
            try:
                yield step
            except BaseException as exc:
                try:
                    step = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                step = coro.send(None)
            except StopIteration as stop:
                return stop.value


class MalformedJobError(PermanentError):
    """The stored job cannot be read (corrupt body or options): it goes dead at once."""


def build_job(
    queue: str,
    partition: int,
    item: Delivered,
    redis_now: int,
    monotonic_now: float,
    default_max_attempts: int,
) -> Job:
    """The Job a handler sees; raises MalformedJobError when the stored job is damaged."""
    if item.attempt == BAD_ATTEMPT:
        raise MalformedJobError("stored job cannot be read: its attempt count is not a number")
    try:
        job_id = item.raw_id.decode()
        # A body with a priority/tenant prefix ('@', jobs.flow_prefix) takes the full path.
        raw = orjson.loads(item.body) if item.body[:1] != b"@" else None
    except Exception as exc:
        raise MalformedJobError(f"stored job cannot be read: {type(exc).__name__}: {exc}") from None
    if type(raw) is list and len(raw) == 2 and type(raw[0]) is str:
        # The common case, [type, payload]: no options to check (this runs once per job).
        return Job(
            job_id,
            queue,
            partition,
            raw[0],
            raw[1],
            item.attempt,
            default_max_attempts,
            item.due_ms,
            None,
            {},
            item.deliveries,
            None,
            redis_now,
            monotonic_now,
        )
    try:
        body = decode_body(item.body)
        options = stored_options(body)
    except Exception as exc:
        raise MalformedJobError(f"stored job cannot be read: {type(exc).__name__}: {exc}") from None
    return Job(
        id=job_id,
        queue=queue,
        partition=partition,
        type=body["t"],
        payload=body.get("p"),
        attempt=item.attempt,
        max_attempts=options.max_attempts or default_max_attempts,
        due_ms=item.due_ms,
        idempotency_key=options.idempotency_key,
        headers=options.headers,
        deliveries=item.deliveries,
        backoff=options.backoff,
        fetched_redis_ms=redis_now,
        fetched_monotonic=monotonic_now,
        limit_key=options.limit_key,
        keep_result=options.keep_result,
        timeout=options.timeout,
        deadline_ms=options.deadline_ms,
        start_within=options.start_within,
        priority=body.get("priority", "default"),
        tenant=body.get("tenant"),
        batch_id=options.workflow[0] if options.workflow else options.callback_of,
        batch_index=options.workflow[1] if options.workflow else None,
        previous=options.previous,
        carries_value=bool(options.workflow and options.workflow[2]),
    )


def _timed(handler: Handler, limit: float, where: str, queue: str, job: Job) -> Any:
    """Run a sync handler in its pool thread; log when it returns after its timeout (its job
    was failed at the timeout; the thread was held until now)."""
    started = time.monotonic()
    try:
        return handler(job)
    finally:
        took = time.monotonic() - started
        if took > limit:
            log_event(
                log,
                "job.overran",
                logging.WARNING,
                job_id=job.id,
                queue=queue,
                job_type=job.type,
                attempt=job.attempt,
                seconds=round(took, 3),
                timeout=limit,
                hint=f"a sync handler ran past {where}: its job was failed and retried at the "
                "timeout, but its thread stayed busy until now (threads cannot be stopped)",
            )


class Executor:
    """Runs handlers for deliveries and reports each outcome to the settler."""

    def __init__(
        self, ctx: WorkerContext, *, settler: Settler, reporter: ProgressReporter | None = None
    ) -> None:
        self.queue = ctx.queue
        self.settings = ctx.settings
        self.inflight = ctx.inflight
        self.settler = settler
        self.stats = ctx.stats
        self.handlers = ctx.handlers
        self.inline_types = ctx.inline_types
        self.on_complete = ctx.on_complete
        self.timeouts = ctx.timeouts
        #: Where a handler's job.progress goes (None: a Job reports nowhere; tests).
        self.report = reporter.report if reporter is not None else None
        self.tasks: set[asyncio.Task[None]] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._async: dict[Handler, bool] = {}
        self._m_lateness = metrics.JOB_LATENESS.labels(ctx.queue)
        self._m_duration: dict[str, Any] = {}
        # Asked once, at start (see shardq.tracing): untraced, an async handler starts eagerly.
        self.traced = tracing.active()
        #: The queue's rate and concurrency limits, in front of the handlers: it holds a job
        #: under a limit and starts it (run_now) once the limit lets it.  The executor asks it
        #: and it answers through the executor, so the executor makes it, handing it run_now.
        self.limiter = Limiter(ctx, run=self.run_now)

    def start(self, partition: int, item: Delivered, redis_now: int, now: float) -> None:
        """Run one delivered job (or dead-letter it when it cannot be read)."""
        d = self.admit(partition, item, redis_now, now)
        if d is not None:
            self.run(d)

    def admit(self, partition: int, item: Delivered, redis_now: int, now: float) -> Delivery | None:
        """Put a delivered job in the in-flight table, ready to :meth:`run`; a job that cannot
        be read is dead-lettered here instead (None)."""
        try:
            job = build_job(
                self.queue, partition, item, redis_now, now, self.settings.default_max_attempts
            )
        except MalformedJobError as exc:
            placeholder = Job(
                item.raw_id.decode(errors="replace"),
                self.queue,
                partition,
                "?",
                None,
                item.attempt,
                1,
                item.due_ms,
            )
            bad = Delivery(partition, item.entry_id, item.raw_id, placeholder, now)
            self.inflight.add(bad)
            self.stats.malformed += 1
            metrics.MALFORMED.labels(self.queue, "job").inc()
            self._failed(bad, exc)
            return None
        job.reporter = self.report
        d = Delivery(partition, item.entry_id, item.raw_id, job, now, reserved=item.reserved)
        self.inflight.add(d)
        return d

    def run(self, d: Delivery) -> None:
        """Start an admitted delivery's handler, unless a rate limit holds it first (the
        limiter then starts it through :meth:`run_now`, or defers it)."""
        if self.limiter.holds(d):
            return
        self.run_now(d)

    def run_now(self, d: Delivery) -> None:
        """Start an admitted delivery's handler; a job past its deadline is dead-lettered
        instead, never started."""
        job = d.job
        if job.deadline_ms is not None or job.start_within is not None:
            why = job.past_deadline(job.redis_now_ms(time.monotonic()))
            if why is not None:
                self._failed(d, DeadlineExceededError(f"not started: {why}"))
                return
        self.stats.started += 1
        handler = self.handlers.get(job.type)
        if handler is not None and job.type in self.inline_types:
            self._run_inline(d, handler)
        elif handler is not None and self._is_async(handler) and not self.traced:
            # (Traced, an async handler runs in a task: its span is current in that task's
            # context, which a coroutine driven by hand here could not keep apart.)
            self._run_eager(d, handler)
        else:
            d.task = self._spawn(self._execute(d))

    def _observe_lateness(self, job: Job, started: float) -> None:
        if job.due_ms is not None:
            self._m_lateness.observe(max(0.0, (job.redis_now_ms(started) - job.due_ms) / 1000.0))

    @staticmethod
    def _lateness_ms(job: Job, started: float) -> int | None:
        return None if job.due_ms is None else round(job.redis_now_ms(started) - job.due_ms)

    def _run_inline(self, d: Delivery, handler: Handler) -> None:
        """An inline handler: called right here on the event loop; only failures need a task."""
        job = d.job
        started = time.monotonic()
        self._observe_lateness(job, started)
        try:
            if self.traced:
                value = tracing.run_sync(handler, job, self._lateness_ms(job, started))
            else:
                value = handler(job)
        except Exception as exc:
            self._duration(job.type).observe(time.monotonic() - started)
            self._failed(d, exc)
            return
        self._duration(job.type).observe(time.monotonic() - started)
        self._succeeded(d, value)
        if self.on_complete is not None:
            self.on_complete(job)

    def _run_eager(self, d: Delivery, handler: Handler) -> None:
        """An async handler, started at once on this call's stack (no task, no trip through the
        event loop): one that finishes without waiting for anything costs no task at all.  One
        that suspends continues in a task, just as if it had been started in one (Python 3.12's
        eager tasks do the same)."""
        job = d.job
        started = time.monotonic()
        self._observe_lateness(job, started)
        coro = handler(job)
        try:
            step = coro.send(None)
        except StopIteration as done:
            self._duration(job.type).observe(time.monotonic() - started)
            self._succeeded(d, done.value)
            if self.on_complete is not None:
                self.on_complete(job)
            return
        except Exception as exc:
            self._duration(job.type).observe(time.monotonic() - started)
            self._failed(d, exc)
            return
        d.task = self._spawn(self._execute(d, _Resume(coro, step), started))

    def _succeeded(self, d: Delivery, value: Any = None) -> None:
        """The handler returned ``value``: its ack is buffered (with its result record, when
        the job keeps its result) and its running slots go back at once."""
        if d.job.keep_result is not None or d.job.carries_value:
            d.result = results.record(d.job, value, self.settings.max_result_bytes)
        elif d.job.batch_index is not None:
            d.result = b""  # a batch child settles through complete: its end is reported
        self.settler.succeeded(d)
        if d.slots:
            self.limiter.finished(d)

    def _failed(self, d: Delivery, exc: BaseException) -> None:
        """The handler raised or was stopped (or the job cannot be read): its failure is
        settled and its running slots go back at once."""
        self.settler.failed(d, exc)
        if d.slots:
            self.limiter.finished(d)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _execute(
        self, d: Delivery, resume: _Resume | None = None, started: float | None = None
    ) -> None:
        """Run the handler (or, with ``resume``, the rest of one started eagerly) and settle."""
        job = d.job
        handler = self.handlers.get(job.type)
        if started is None:
            started = time.monotonic()
            self._observe_lateness(job, started)
        try:
            value: Any = None
            if resume is not None:
                value = await resume
            elif handler is None:
                raise UnknownJobTypeError(
                    f"no handler for job type {job.type!r} on this worker: register one with "
                    f"worker.register({job.type!r}, fn) (known: {sorted(self.handlers)})"
                )
            elif self.traced:
                value = await tracing.run_async(
                    lambda: self._call(handler, job), job, self._lateness_ms(job, started)
                )
            else:
                value = await self._call(handler, job)
        except asyncio.CancelledError:
            if d.cancelled:
                # Its job was cancelled while running (cancel_running): it ends as cancelled.
                self._failed(d, JobCancelledError(f"job {job.id} was cancelled while running"))
                return
            if d.timed_out:
                # The watchdog stopped a handler that ran over handler_timeout: retry it.
                self._failed(d, self._timeout_error(job))
                return
            # Shutdown grace ran out: leave the delivery pending; another worker reclaims it.
            self.inflight.remove(d.partition, d.entry_id)
            raise
        except Exception as exc:
            self._duration(job.type).observe(time.monotonic() - started)
            self._failed(d, exc)
            return
        self._duration(job.type).observe(time.monotonic() - started)
        self._succeeded(d, value)
        if self.on_complete is not None:
            self.on_complete(job)

    def _duration(self, job_type: str) -> Any:
        # Keyed by the label, not the raw type: a producer sending endless unknown types must
        # grow neither the series nor this cache.
        label = metrics.job_type_label(job_type, self.handlers)
        child = self._m_duration.get(label)
        if child is None:
            child = self._m_duration[label] = metrics.JOB_DURATION.labels(self.queue, label)
        return child

    def _is_async(self, handler: Handler) -> bool:
        known = self._async.get(handler)
        if known is None:
            known = self._async[handler] = inspect.iscoroutinefunction(handler)
        return known

    async def _call(self, handler: Handler, job: Job) -> Any:
        """The handler's return value (awaited, for an async one or a sync one returning an
        awaitable)."""
        if self._is_async(handler):
            return await handler(job)
        if self._pool is None:
            shared = self.inflight.pool
            # A worker of several queues runs every queue's sync handlers in one pool.
            self._pool = (
                shared.threads()
                if shared is not None
                else ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="shardq-job")
            )
        # A sync handler that overruns its timeout keeps its thread until it returns (threads
        # cannot be killed); the job itself is settled as failed at the timeout, and when the
        # thread is free again the overrun is logged (job.overran), so it shows.
        loop = asyncio.get_running_loop()
        limit, where = self._timeout_of(job)
        call: Callable[[Job], Any] = handler
        if limit is not None:
            call = functools.partial(_timed, handler, limit, where, self.queue)
        if self.traced:
            # The job's span is current in this task's context: the pool's thread runs the
            # handler in a copy of it, so the handler's own spans are the span's children.
            ctx = contextvars.copy_context()
            ran = loop.run_in_executor(self._pool, ctx.run, call, job)
        else:
            ran = loop.run_in_executor(self._pool, call, job)
        if limit is None:
            result = await ran
        else:
            # A timer of its own, not the watchdog's round (every heartbeat_interval): the job
            # fails at its timeout, not up to a heartbeat later.  A thread's hop costs far more
            # than the timer, and async handlers keep the watchdog (no timer per job).  At the
            # limit asyncio.timeout cancels this await, and with it the pool's future, as this
            # task's own cancel (a running cancel, shutdown) does and tells apart: nobody
            # awaits the outcome then, and the thread runs on (threads cannot be stopped;
            # _timed logs an overrun).  expired(): a TimeoutError the handler raised itself is
            # the handler's failure, not a timeout.
            deadline = asyncio.timeout(limit)
            try:
                async with deadline:
                    result = await ran
            except TimeoutError:
                if deadline.expired():
                    raise self._timeout_error(job) from None
                raise
        if inspect.isawaitable(result):
            return await result
        return result

    def holding(self, partition: int, job_id: bytes) -> Delivery | None:
        """The delivery of ``job_id`` this worker runs in ``partition`` and has not flagged
        cancelled yet, or None."""
        for d in self.inflight.by_partition.get(partition, {}).values():
            if d.raw_id == job_id and not d.cancelled:
                return d
        return None

    def cancel_running(self, partition: int, job_id: bytes | str) -> bool:
        """A running job of ``partition`` was cancelled, as the heartbeat read in Redis (its
        envelope is gone: lua/touch-3.lua; a signal alone never comes here): flag it
        (``job.cancelled``) and cancel an async handler's task; it ends as cancelled whatever
        the handler does.  False when this worker does not hold it."""
        raw = job_id.encode() if isinstance(job_id, str) else job_id
        d = self.holding(partition, raw)
        if d is None:
            return False
        d.cancelled = True
        d.job.cancelled = True
        if d.task is not None and not d.finished:
            d.task.cancel()
        return True

    def _timeout_error(self, job: Job) -> HandlerTimeoutError:
        limit, where = self._timeout_of(job)
        return HandlerTimeoutError(
            f"handler for {job.type!r} ran over {where} ({limit} s): make it "
            f"faster, split the job, or raise {where}"
        )

    def _timeout_of(self, job: Job) -> tuple[float | None, str]:
        """How long one attempt of ``job`` may run, and what set it: the job's own
        ``timeout``, its task's declared one (shardq.tasks), else handler_timeout."""
        if job.timeout is not None:
            return job.timeout, "its timeout"
        if job.type in self.timeouts:
            return self.timeouts[job.type], "its task's timeout"
        return self.settings.handler_timeout, "handler_timeout"

    def watchdog(self) -> None:
        """Cancel handlers running longer than their timeout (:meth:`_timeout_of`)."""
        now = time.monotonic()
        default = self.settings.handler_timeout
        timeouts = self.timeouts
        for d in self.inflight.all():
            if d.timed_out or d.task is None or d.finished:
                continue
            job = d.job
            if job.timeout is not None:
                limit: float | None = job.timeout
            else:
                limit = timeouts.get(job.type, default) if timeouts else default
            if limit is not None and d.started < now - limit:
                d.timed_out = True
                d.task.cancel()

    async def drain(self, grace: float, flush: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Give running handlers ``grace`` seconds, flushing acks meanwhile; cancel the rest."""
        deadline = time.monotonic() + grace
        while self.tasks and time.monotonic() < deadline:
            await asyncio.wait(list(self.tasks), timeout=min(0.1, deadline - time.monotonic()))
            await flush()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def close(self) -> None:
        if self._pool is not None and self.inflight.pool is None:  # a shared one: its owner's
            self._pool.shutdown(wait=False, cancel_futures=True)
