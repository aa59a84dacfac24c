"""The sync and asyncio inspectors: the same methods, over :mod:`shardq.inspector`'s plans."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from shardq import inspector as plans
from shardq.connection import as_text
from shardq.errors import InvalidScheduleError, ShardqError
from shardq.jobs import JobInfo
from shardq.names import check_idempotency_key
from shardq.store import keys, numbers, transport

if TYPE_CHECKING:
    from shardq.aio import AsyncClient
    from shardq.client import Client

T = TypeVar("T")
Progress = Callable[[int], None] | None


class QueueInUseError(ShardqError):
    """A queue still has live workers or dispatchers (deleting it would strand them)."""


def _ms(when: datetime | float | None) -> int | None:
    """Epoch ms of a datetime (timezone-aware) or epoch seconds; None stays None."""
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidScheduleError("pass a timezone-aware datetime (e.g. datetime.now(UTC))")
        return round(when.timestamp() * 1000)
    try:
        return round(numbers.real(when, 0, numbers.MAX_TIME_MS / 1000, what="a time") * 1000)
    except numbers.BadNumber as exc:
        raise InvalidScheduleError(f"{exc}: pass a datetime or epoch seconds") from None


def _members_raw(replies: list[Any]) -> tuple[int, dict[str, Any]]:
    (seconds, micros), disp, work, disp_drain, work_drain = replies
    raw = {
        "dispatcher": [(as_text(m), float(s)) for m, s in disp],
        "worker": [(as_text(m), float(s)) for m, s in work],
        "dispatcher_drain": {as_text(m) for m in disp_drain},
        "worker_drain": {as_text(m) for m in work_drain},
    }
    return int(seconds) * 1000 + int(micros) // 1000, raw


class Inspector:
    """Look inside queues and act on them (sync).  ``Inspector(client)``; see
    :mod:`shardq.inspector` for what each page costs."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def _drive(self, plan: plans.Plan[T]) -> T:
        return plans.drive(plan, lambda ops: transport.run_many(self.client.redis, ops))

    def _node_of(self, key: str) -> str:
        manager = getattr(self.client.redis, "nodes_manager", None)
        if manager is None:
            return transport.STANDALONE
        return str(manager.get_node_from_slot(keys.slot_of(key)).name)

    def list_jobs(
        self,
        queue: str,
        state: str,
        *,
        job_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
    ) -> plans.Page:
        """One page of jobs in ``state`` (scheduled, ready, running, retrying, dead); pass the
        page's ``cursor`` back for the next.  ``start``/``end`` bound scheduled jobs' due time."""
        return self._drive(
            plans.list_plan(
                queue, self.client.partitions(queue), state, job_type=job_type, limit=limit,
                cursor=cursor, start_ms=_ms(start), end_ms=_ms(end),
            )
        )  # fmt: skip

    def get(self, queue: str, job_id: str) -> JobInfo | None:
        """One job by id (None: finished, cancelled or never existed)."""
        return self.client.get(queue, job_id)

    def find(self, queue: str, idempotency_key: str) -> JobInfo | None:
        """The job enqueued with ``idempotency_key`` while the key is retained, else None."""
        check_idempotency_key(idempotency_key)
        partitions = self.client.partitions(queue)
        pk = keys.partition_keys(queue, keys.partition_for(idempotency_key, partitions), partitions)
        job_id = self.client.redis.get(pk.idem(idempotency_key))
        return None if job_id is None else self.client.get(queue, as_text(job_id))

    def partitions(self, queue: str) -> list[plans.PartitionInfo]:
        """Every partition now: counts per state, oldest due, lag, owner, node, paused."""
        n = self.client.partitions(queue)
        return self._drive(plans.partitions_plan(queue, n, self._node_of))

    def members(self, queue: str) -> list[plans.Member]:
        """Live dispatchers and workers: partitions held, deliveries in flight, heartbeat."""
        r = self.client.redis
        reg = plans.registry_keys(queue)
        replies = [
            r.time(),
            r.zrange(reg["dispatcher"], 0, -1, withscores=True),
            r.zrange(reg["worker"], 0, -1, withscores=True),
            r.smembers(reg["dispatcher_drain"]),
            r.smembers(reg["worker_drain"]),
        ]
        now, raw = _members_raw(replies)
        return self._drive(plans.members_plan(queue, self.client.partitions(queue), now, raw))

    def pause(self, queue: str) -> int:
        """Pause every partition: nothing is promoted or delivered until :meth:`resume`; jobs
        keep their due times.  Returns how many partitions changed state."""
        return self._drive(plans.pause_plan(queue, self.client.partitions(queue), True))

    def resume(self, queue: str) -> int:
        """Resume every partition and wake its dispatcher and workers at once."""
        return self._drive(plans.pause_plan(queue, self.client.partitions(queue), False))

    def run_now(self, queue: str, job_id: str) -> str:
        """Make a scheduled or dead job due now; returns what it was (``scheduled``, ``dead``,
        or ``ready`` when already promoted).  JobRunningError when a worker holds it."""
        return self._drive(plans.run_now_plan(queue, self.client.partitions(queue), job_id))

    def retry_dead(self, queue: str, job_type: str | None = None, progress: Progress = None) -> int:
        """Replay every dead job (of ``job_type``), attempts reset; returns how many."""
        n = self.client.partitions(queue)
        return self._drive(plans.retry_dead_plan(queue, n, job_type, progress))

    def cancel(
        self,
        queue: str,
        state: str = "scheduled",
        *,
        job_type: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        progress: Progress = None,
    ) -> int:
        """Cancel every not-started job in ``state`` matching the filter; returns how many."""
        n = self.client.partitions(queue)
        return self._drive(
            plans.cancel_plan(queue, n, state, job_type, _ms(start), _ms(end), progress)
        )

    def empty(self, queue: str, state: str, progress: Progress = None) -> int:
        """Delete every job in ``state`` (scheduled, ready, retrying, dead), in bounded batches;
        returns how many."""
        n = self.client.partitions(queue)
        return self._drive(plans.empty_plan(queue, n, state, progress))

    def delete_queue(self, queue: str, *, force: bool = False) -> int:
        """Delete the queue and every job in it.  Refused while workers or dispatchers are
        live (stop them first) unless ``force``.  Returns how many keys were deleted."""
        n = self.client.partitions(queue)
        live = self.members(queue)
        if live and not force:
            raise QueueInUseError(
                f"queue {queue!r} has {len(live)} live workers/dispatchers: stop them first "
                "(or force)"
            )
        self.pause(queue)  # nothing new is promoted or delivered while the keys go
        deleted = 0
        for names in plans.partition_key_names(queue, n):
            deleted += int(self.client.redis.unlink(*names))
        deleted += sum(int(self.client.redis.unlink(k)) for k in plans.queue_key_names(queue))
        self.client.redis.srem(keys.QUEUES_KEY, queue)
        self.client.forget(queue)
        return deleted


class AsyncInspector:
    """:class:`Inspector` for asyncio: the same methods, awaited."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def _drive(self, plan: plans.Plan[T]) -> T:
        return await plans.drive_async(plan, self.client.transport.run_many)

    async def list_jobs(
        self,
        queue: str,
        state: str,
        *,
        job_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
    ) -> plans.Page:
        n = await self.client.partitions(queue)
        return await self._drive(
            plans.list_plan(
                queue, n, state, job_type=job_type, limit=limit, cursor=cursor,
                start_ms=_ms(start), end_ms=_ms(end),
            )
        )  # fmt: skip

    async def get(self, queue: str, job_id: str) -> JobInfo | None:
        return await self.client.get(queue, job_id)

    async def find(self, queue: str, idempotency_key: str) -> JobInfo | None:
        check_idempotency_key(idempotency_key)
        partitions = await self.client.partitions(queue)
        pk = keys.partition_keys(queue, keys.partition_for(idempotency_key, partitions), partitions)
        job_id = await self.client.redis.get(pk.idem(idempotency_key))
        return None if job_id is None else await self.client.get(queue, as_text(job_id))

    async def partitions(self, queue: str) -> list[plans.PartitionInfo]:
        n = await self.client.partitions(queue)
        return await self._drive(plans.partitions_plan(queue, n, self.client.transport.node_name))

    async def members(self, queue: str) -> list[plans.Member]:
        r = self.client.redis
        reg = plans.registry_keys(queue)
        replies = [
            await r.time(),
            await r.zrange(reg["dispatcher"], 0, -1, withscores=True),
            await r.zrange(reg["worker"], 0, -1, withscores=True),
            await r.smembers(reg["dispatcher_drain"]),
            await r.smembers(reg["worker_drain"]),
        ]
        now, raw = _members_raw(replies)
        n = await self.client.partitions(queue)
        return await self._drive(plans.members_plan(queue, n, now, raw))

    async def pause(self, queue: str) -> int:
        n = await self.client.partitions(queue)
        return await self._drive(plans.pause_plan(queue, n, True))

    async def resume(self, queue: str) -> int:
        n = await self.client.partitions(queue)
        return await self._drive(plans.pause_plan(queue, n, False))

    async def run_now(self, queue: str, job_id: str) -> str:
        n = await self.client.partitions(queue)
        return await self._drive(plans.run_now_plan(queue, n, job_id))

    async def retry_dead(
        self, queue: str, job_type: str | None = None, progress: Progress = None
    ) -> int:
        n = await self.client.partitions(queue)
        return await self._drive(plans.retry_dead_plan(queue, n, job_type, progress))

    async def cancel(
        self,
        queue: str,
        state: str = "scheduled",
        *,
        job_type: str | None = None,
        start: datetime | float | None = None,
        end: datetime | float | None = None,
        progress: Progress = None,
    ) -> int:
        n = await self.client.partitions(queue)
        return await self._drive(
            plans.cancel_plan(queue, n, state, job_type, _ms(start), _ms(end), progress)
        )

    async def empty(self, queue: str, state: str, progress: Progress = None) -> int:
        n = await self.client.partitions(queue)
        return await self._drive(plans.empty_plan(queue, n, state, progress))

    async def delete_queue(self, queue: str, *, force: bool = False) -> int:
        n = await self.client.partitions(queue)
        live = await self.members(queue)
        if live and not force:
            raise QueueInUseError(
                f"queue {queue!r} has {len(live)} live workers/dispatchers: stop them first "
                "(or force)"
            )
        await self.pause(queue)
        r = self.client.redis
        deleted = 0
        for names in plans.partition_key_names(queue, n):
            deleted += int(await r.unlink(*names))
        for k in plans.queue_key_names(queue):
            deleted += int(await r.unlink(k))
        await r.srem(keys.QUEUES_KEY, queue)
        self.client.forget(queue)
        return deleted
