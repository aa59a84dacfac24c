"""The asyncio producer client: the same operations and semantics as :class:`shardq.Client`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from redis.exceptions import ResponseError

from shardq import keys, ops, scripts
from shardq.client import group_create_args, unknown_queue
from shardq.config import ProducerSettings, RedisSettings
from shardq.connection import AsyncRedis, connect_async
from shardq.durable import AsyncNodes
from shardq.jobs import Backoff, JobInfo, check_queue_name


class AsyncClient:
    """Asyncio producer.  Create it with ``await AsyncClient.from_url(url)``."""

    def __init__(self, redis: AsyncRedis, settings: ProducerSettings | None = None) -> None:
        self.redis = redis
        self.settings = settings or ProducerSettings()
        self._partitions: dict[str, int] = {}
        self._nodes = AsyncNodes(redis)

    @classmethod
    async def from_url(
        cls, url: str | RedisSettings, settings: ProducerSettings | None = None
    ) -> AsyncClient:
        redis_settings = RedisSettings.from_url(url) if isinstance(url, str) else url
        return cls(await connect_async(redis_settings), settings)

    async def close(self) -> None:
        await self._nodes.aclose()
        await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def create_queue(
        self,
        queue: str,
        partitions: int = 64,
        *,
        ack_retention: float = 0.0,
        dead_letter_cap: int = ops.DEFAULT_DEAD_CAP,
    ) -> bool:
        """See :meth:`shardq.Client.create_queue`."""
        reply = await scripts.arun(
            self.redis, *ops.queue_create_call(queue, partitions, ack_retention, dead_letter_cap)
        )
        created = bool(ops.check_reply(reply)[0] == 1)
        pipe = self.redis.pipeline(transaction=False)
        for args in group_create_args(queue, partitions):
            pipe.execute_command(*args)
        for result in await pipe.execute(raise_on_error=False):
            if isinstance(result, ResponseError) and "BUSYGROUP" not in str(result):
                raise result
        await self.redis.sadd(keys.QUEUES_KEY, queue)  # type: ignore[misc]
        self._partitions[queue] = partitions
        return created

    async def partitions(self, queue: str) -> int:
        cached = self._partitions.get(queue)
        if cached is not None:
            return cached
        check_queue_name(queue)
        raw = await self.redis.hget(keys.queue_meta_key(queue), "partitions")  # type: ignore[misc]
        if raw is None:
            raise unknown_queue(queue)
        self._partitions[queue] = int(raw)
        return int(raw)

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
    ) -> str:
        """See :meth:`shardq.Client.enqueue`."""
        request = ops.JobRequest(
            job_type,
            payload,
            run_at,
            delay,
            job_id,
            idempotency_key,
            max_attempts,
            backoff,
            headers,
        )
        return (await self.enqueue_detailed(queue, request, durable=durable)).job_id

    async def enqueue_detailed(
        self, queue: str, request: ops.JobRequest, *, durable: bool = False
    ) -> ops.EnqueueResult:
        prepared = ops.prepare_enqueue(queue, await self.partitions(queue), request, self.settings)
        if not durable:
            return prepared.parse(await scripts.arun(self.redis, *prepared.call()))
        s = self.settings
        reply, acked = await self._nodes.run_durable(
            prepared.call(), s.durable_replicas, round(s.durable_timeout * 1000)
        )
        result = prepared.parse(reply)
        ops.check_durable([result.job_id], acked, s)
        return result

    async def enqueue_many(
        self,
        queue: str,
        requests: Iterable[ops.JobRequest],
        *,
        chunk: int = 5000,
        durable: bool = False,
    ) -> list[ops.EnqueueResult]:
        """See :meth:`shardq.Client.enqueue_many`."""
        partitions = await self.partitions(queue)
        prepared = [ops.prepare_enqueue(queue, partitions, r, self.settings) for r in requests]
        results: list[ops.EnqueueResult] = []
        not_durable: list[str] = []
        for start in range(0, len(prepared), chunk):
            part = prepared[start : start + chunk]
            plan = ops.plan_bulk(part)
            if durable:
                # One WAIT per call on its own node connection, all calls at once.
                s = self.settings
                waited = await asyncio.gather(
                    *(
                        self._nodes.run_durable(
                            call, s.durable_replicas, round(s.durable_timeout * 1000)
                        )
                        for call in plan.calls
                    )
                )
                replies = [reply for reply, _ in waited]
                not_durable += [
                    part[j].job_id
                    for i, (_, acked) in enumerate(waited)
                    if acked < s.durable_replicas
                    for j in plan.members[i]
                ]
            else:
                replies = await scripts.arun_many(self.redis, plan.calls)
            results.extend(plan.results(part, replies))
        if not_durable:
            ops.check_durable(not_durable, 0, self.settings)
        return results

    async def cancel(self, queue: str, job_id: str) -> bool:
        """See :meth:`shardq.Client.cancel`."""
        call = ops.cancel_call(queue, await self.partitions(queue), job_id)
        return ops.parse_cancel(await scripts.arun(self.redis, *call))

    async def reschedule(
        self,
        queue: str,
        job_id: str,
        *,
        run_at: datetime | float | None = None,
        delay: timedelta | float | None = None,
    ) -> int:
        """See :meth:`shardq.Client.reschedule`."""
        call = ops.reschedule_call(
            queue, await self.partitions(queue), job_id, run_at, delay, self.settings
        )
        return ops.parse_reschedule(await scripts.arun(self.redis, *call))

    async def get(self, queue: str, job_id: str) -> JobInfo | None:
        """See :meth:`shardq.Client.get`."""
        partitions = await self.partitions(queue)
        reply = await scripts.arun(self.redis, *ops.get_call(queue, partitions, job_id))
        return ops.parse_get(queue, partitions, job_id, reply)
