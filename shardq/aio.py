"""The asyncio producer client: the same operations and semantics as :class:`shardq.Client`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from shardq import tracing
from shardq.client import BulkRun
from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import AsyncRedis, as_text, connect_async
from shardq.errors import BulkEnqueueError, InvalidLimitError
from shardq.jobs import (
    Backoff,
    EnqueueResult,
    JobInfo,
    JobRequest,
)
from shardq.limits import Limit
from shardq.names import Priority, check_limit_name, check_queue_name
from shardq.runtime import redis_config
from shardq.schedules import AsyncSchedules
from shardq.store import faults, keys, producer, retry
from shardq.store import limits as store_limits
from shardq.store.meta import QueueMeta
from shardq.store.op import Op
from shardq.store.transport import AsyncTransport

T = TypeVar("T")


class AsyncClient:
    """Asyncio producer.  Create it with ``await AsyncClient.from_url(url)``."""

    def __init__(self, redis: AsyncRedis, settings: ProducerSettings | None = None) -> None:
        self.redis = redis
        self.settings = settings or ProducerSettings()
        self.transport = AsyncTransport(redis)
        self._queues = producer.QueueCache()
        #: Periodic jobs, as ``Client.schedules`` (see shardq.schedules).
        self.schedules = AsyncSchedules(self)

    @classmethod
    async def from_url(
        cls, url: str | RedisSettings, settings: ProducerSettings | None = None
    ) -> AsyncClient:
        redis_settings = RedisSettings.from_url(url) if isinstance(url, str) else url
        return cls(await connect_async(redis_settings), settings)

    async def close(self) -> None:
        await self.transport.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _retry(
        self, fn: Callable[[], Awaitable[T]], *, safe_to_repeat: bool = True, what: str
    ) -> T:
        return await retry.async_call(
            self.transport.refresh,
            fn,
            self.settings.retry_timeout,
            safe_to_repeat=safe_to_repeat,
            what=what,
        )

    async def _run(self, op: Op[T], *, safe_to_repeat: bool = True, what: str) -> T:
        return await self._retry(
            lambda: self.transport.run(op), safe_to_repeat=safe_to_repeat, what=what
        )

    async def create_queue(
        self,
        queue: str,
        partitions: int = 64,
        *,
        ack_retention: float = 0.0,
        dead_letter_cap: int = producer.DEFAULT_DEAD_CAP,
        allow_evicting_redis: bool = False,
        lanes: bool = False,
    ) -> bool:
        """See :meth:`shardq.Client.create_queue`."""
        op = producer.queue_create(queue, partitions, ack_retention, dead_letter_cap)
        if not allow_evicting_redis:
            found = await self.check_redis()
            error = redis_config.refusal(found, allow_eviction=False)
            if error is not None:
                raise error
        created = bool(await self._run(op, what=f"creating queue {queue!r}"))
        await self._retry(lambda: self._create_groups(queue, partitions), what="creating groups")
        await self._retry(
            lambda: self.redis.sadd(keys.QUEUES_KEY, queue),  # type: ignore[arg-type,return-value]
            what="registering the queue",
        )
        self.forget(queue)  # read back with its layout (an existing queue keeps its own)
        if (await self._read_meta(queue)).layout >= keys.CONTROL_LAYOUT:
            await self._control(queue, partitions)
        if lanes:
            await self.set_lanes(queue, True)
        return created

    async def set_lanes(self, queue: str, on: bool) -> int:
        """Turn the queue's lanes on or off; returns how many partitions changed.

        With lanes on, due jobs wait in each partition's lane and are delivered by priority
        (high, default, low shared 6:3:1) and round-robin between tenants, instead of in due
        order; it costs every job a few more Redis commands (docs/capacity.md).  Jobs already
        in a ready stream when lanes are turned on are delivered first; jobs in a lane when
        they are turned off are still delivered.
        """
        from shardq import inspector

        meta = keys.queue_meta_key(queue)
        n = await self.partitions(queue)
        # Producers check the meta flag: it is on only while every partition is.
        if not on:
            await self._retry(lambda: self.redis.hset(meta, "lanes", "0"), what="turning lanes off")
        changed: int = await self._retry(
            lambda: inspector.drive_async(
                inspector.lanes_plan(queue, n, on), self.transport.run_many
            ),
            what=f"turning lanes of {queue!r} {'on' if on else 'off'}",
        )
        if on:
            await self._retry(lambda: self.redis.hset(meta, "lanes", "1"), what="turning lanes on")
        self._queues.saw_lanes(queue, on)
        return changed

    async def lanes(self, queue: str) -> bool:
        """Whether the queue has lanes on (read from Redis, not cached)."""
        await self.partitions(queue)
        raw = await self._retry(
            lambda: self.redis.hget(keys.queue_meta_key(queue), "lanes"),  # type: ignore[arg-type,return-value]
            what="reading queue lanes",
        )
        return raw is not None and as_text(raw) == "1"

    async def require_lanes(self, queue: str) -> None:
        """See :meth:`shardq.Client.require_lanes`."""
        if self._queues.lanes_trusted(queue):
            return
        on = await self.lanes(queue)
        self._queues.saw_lanes(queue, on)
        if not on:
            raise producer.lanes_off(queue)

    async def check_redis(self, require_appendonly: bool = False) -> list[redis_config.Finding]:
        """See :meth:`shardq.Client.check_redis`."""
        nodes = await self._retry(
            lambda: redis_config.read_async_client(self.redis), what="checking Redis settings"
        )
        return redis_config.findings(nodes, require_appendonly)

    async def _create_groups(self, queue: str, partitions: int) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for args in producer.group_create_commands(queue, partitions):
            pipe.execute_command(*args)
        for result in await pipe.execute(raise_on_error=False):
            if isinstance(result, ResponseError) and "BUSYGROUP" not in str(result):
                raise result

    def forget(self, queue: str) -> None:
        """Drop what is cached about ``queue`` (it was deleted or re-created)."""
        self._queues.forget(queue)

    async def partitions(self, queue: str) -> int:
        cached = self._queues.get(queue)
        if cached is not None:
            return cached.meta.partitions
        return (await self._read_meta(queue)).partitions

    async def _read_meta(self, queue: str) -> QueueMeta:
        """See :meth:`shardq.Client._read_meta`."""
        check_queue_name(queue)
        raw = await self._retry(
            lambda: self.redis.hgetall(keys.queue_meta_key(queue)),  # type: ignore[arg-type,return-value]
            what=f"reading queue {queue!r}",
        )
        return self._queues.store(queue, raw)

    async def upgrade_queue(self, queue: str) -> int:
        """See :meth:`shardq.Client.upgrade_queue`."""
        meta = keys.queue_meta_key(queue)
        read = await self._read_meta(queue)
        await self._control(queue, read.partitions)
        if read.layout < keys.LAYOUT_VERSION:
            await self._retry(
                lambda: self.redis.hset(meta, "layout", keys.LAYOUT_VERSION),  # type: ignore[arg-type,return-value]
                what="upgrading",
            )
        self.forget(queue)
        return read.layout

    async def _control(self, queue: str, partitions: int) -> int:
        """See :meth:`shardq.Client._control`."""
        from shardq import inspector

        changed: int = await self._retry(
            lambda: inspector.drive_async(
                inspector.control_plan(queue, partitions), self.transport.run_many
            ),
            what=f"moving the flags of {queue!r} to the control hashes",
        )
        return changed

    async def compact(self, queue: str) -> bool:
        """See :meth:`shardq.Client.compact`."""
        await self.partitions(queue)
        return self._queues.compact(queue)

    async def queues(self) -> list[str]:
        """Names of every queue created on this Redis."""
        members = await self._retry(
            lambda: self.redis.smembers(keys.QUEUES_KEY),  # type: ignore[arg-type,return-value]
            what="listing queues",
        )
        return sorted(as_text(q) for q in members)

    # rate limits ---------------------------------------------------------------------------

    async def set_limit(self, queue: str, limit: Limit) -> None:
        """See :meth:`shardq.Client.set_limit`."""
        if not isinstance(limit, Limit):
            raise InvalidLimitError(
                "set_limit takes a shardq.Limit: limits.for_type(), for_key() or for_tenant()"
            )
        await self.partitions(queue)
        await self._retry(
            lambda: self.redis.hset(keys.limits_key(queue), limit.name, limit.to_json()),  # type: ignore[arg-type,return-value]
            what=f"setting limit {limit.name}",
        )

    async def limits(self, queue: str) -> list[Limit]:
        """See :meth:`shardq.Client.limits`."""
        await self.partitions(queue)
        raw = await self._retry(
            lambda: self.redis.hgetall(keys.limits_key(queue)),  # type: ignore[arg-type,return-value]
            what=f"reading limits of {queue!r}",
        )
        return store_limits.parse_table(raw)

    async def remove_limit(self, queue: str, name: str) -> bool:
        """See :meth:`shardq.Client.remove_limit`."""
        check_limit_name(name)
        await self.partitions(queue)
        removed = await self._retry(
            lambda: self.redis.hdel(keys.limits_key(queue), name),  # type: ignore[arg-type,return-value]
            what=f"removing limit {name}",
        )
        return bool(removed)

    async def enqueue(
        self,
        queue: str,
        job_type: str,
        payload: Any = None,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        job_id: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        headers: dict[str, str] | None = None,
        durable: bool = False,
        limit_key: str | None = None,
        priority: Priority | None = None,
        tenant: str | None = None,
    ) -> str:
        """See :meth:`shardq.Client.enqueue`."""
        request = JobRequest(
            job_type,
            payload,
            run_at,
            delay,
            job_id,
            idempotency_key,
            max_attempts,
            backoff,
            headers,
            limit_key,
            priority,
            tenant,
        )
        return (await self.enqueue_detailed(queue, request, durable=durable)).job_id

    async def enqueue_detailed(
        self, queue: str, request: JobRequest, *, durable: bool = False
    ) -> EnqueueResult:
        """See :meth:`shardq.Client.enqueue_detailed`."""
        if tracing.active():
            with tracing.producer_span(queue) as span:
                request = tracing.with_headers(request, tracing.trace_headers())
                done = await self._enqueue_one(queue, request, durable)
                tracing.sent(span, done.job_id, done.partition)
                return done
        return await self._enqueue_one(queue, request, durable)

    async def _enqueue_one(self, queue: str, request: JobRequest, durable: bool) -> EnqueueResult:
        partitions = await self.partitions(queue)
        prepared = producer.prepare_enqueue(
            queue, partitions, request, self.settings, self._queues.compact(queue)
        )
        if prepared.body[:1] == b"@":
            await self.require_lanes(queue)
        if not durable:
            return await self._run(prepared.op(), what=f"enqueue of job {prepared.job_id}")
        try:
            run = BulkRun([prepared], self.settings)
            deadline = time.monotonic() + self.settings.retry_timeout
            await self._bulk(run, durable=True, deadline=deadline)
            return run.outcome()[0]
        except BulkEnqueueError as exc:
            raise next(iter(exc.failed.values())) from None

    async def enqueue_many(
        self,
        queue: str,
        requests: Iterable[JobRequest],
        *,
        chunk: int = 5000,
        durable: bool = False,
    ) -> list[EnqueueResult]:
        """See :meth:`shardq.Client.enqueue_many`."""
        if tracing.active():
            requests = list(requests)
            with tracing.producer_span(queue, len(requests)):
                stamped = tracing.stamp_all(requests, tracing.trace_headers())
                return await self._enqueue_many(queue, stamped, chunk, durable)
        return await self._enqueue_many(queue, requests, chunk, durable)

    async def _enqueue_many(
        self, queue: str, requests: Iterable[JobRequest], chunk: int, durable: bool
    ) -> list[EnqueueResult]:
        partitions = await self.partitions(queue)
        prepared = producer.prepare_many(
            queue, partitions, requests, self.settings, self._queues.compact(queue)
        )
        if producer.needs_lanes(prepared):
            await self.require_lanes(queue)
        # One retry window for the whole call, and one error covering every chunk (see
        # shardq.Client.enqueue_many): a later chunk is never left unsent or unreported.
        deadline = time.monotonic() + self.settings.retry_timeout
        runs = [
            BulkRun(prepared[start : start + chunk], self.settings)
            for start in range(0, len(prepared), chunk)
        ]
        for run in runs:
            await self._bulk(run, durable=durable, deadline=deadline)
        return BulkRun.merged(runs, self.settings).outcome()

    async def _bulk(self, run: BulkRun, *, durable: bool, deadline: float) -> None:
        """Rounds until every call of ``run`` is settled or ``deadline`` passes."""
        s = self.settings
        attempt = 0
        while run.pending:
            calls = run.pending
            ops = [c.op for c in calls]
            if durable:
                results, acked = await self.transport.run_waiting(
                    ops, s.durable_replicas, round(s.durable_timeout * 1000)
                )
                run.settle(calls, results, acked)
            else:
                results = await self.transport.run_many(ops)
                run.settle(calls, results)
            if not run.pending:
                break
            attempt += 1
            if time.monotonic() >= deadline:
                run.give_up()
                break
            try:
                await self.transport.refresh()
            except Exception as exc:  # every node down: the next round fails and retries
                if not faults.is_transient(exc):
                    raise
            await asyncio.sleep(retry.pause(attempt))

    async def cancel(self, queue: str, job_id: str) -> bool:
        """See :meth:`shardq.Client.cancel`."""
        op = producer.cancel(queue, await self.partitions(queue), job_id)
        return bool(await self._run(op, safe_to_repeat=False, what=f"cancel of job {job_id}"))

    async def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
        priority: Priority | None = None,
    ) -> int:
        """See :meth:`shardq.Client.reschedule`."""
        if producer.priority_needs_lanes(priority):
            await self.require_lanes(queue)
        op = producer.reschedule(
            queue, await self.partitions(queue), job_id, run_at, delay, self.settings, priority
        )
        return int(await self._run(op, what=f"reschedule of job {job_id}"))

    async def get(self, queue: str, job_id: str) -> JobInfo | None:
        """See :meth:`shardq.Client.get`."""
        op = producer.get(queue, await self.partitions(queue), job_id)
        return await self._run(op, what=f"reading job {job_id}")
